#!/usr/bin/env bash
# Creates Chime's RabbitMQ users on one vhost with the permissions each needs:
# the scheduler's user (chimed), and one user per app for its consumers and observers.
# See docs/security.md, "Authenticated messages".
#
# Usage:
#   deploy/rabbitmq/permissions.sh --vhost VHOST --scheduler USER \
#       --app USER:APP:GROUP[,GROUP...][:broadcast][:observe] [--app ...] [--password-dir DIR]
#
#   --vhost         the vhost (created if missing), e.g. / or chime
#   --scheduler     chimed's user (its amqp_url names it)
#   --app           an app's user, the app name its jobs use, the consumer groups its
#                   consumers serve, and what else they may do:
#                     broadcast  its consumers run broadcast jobs (an exclusive queue per
#                                instance, bound to chime.broadcast)
#                     observe    it runs observers (queues named APP or APP-..., bound only
#                                to APP.# on chime.topics)
#   --password-dir  where each new user's password is read from (DIR/USER), or written to
#                   (random, mode 0600) when the file is missing; default ./rabbitmq-passwords
#
# An app's user may configure none of the shared exchanges and queues and may not bind
# anything to chime.tasks: chimed declares every group's queues (when a job targets the
# group) and the consumer library uses them as they are. Broadcast and observer rights add
# what they need, which lets that app bind its own queues to other groups' broadcasts or
# (observe) dead letters; grant them only to apps that use them. docs/security.md explains
# each right.
#
# Existing users keep their passwords; their permissions on VHOST are replaced. Nothing
# secret is printed. Set RABBITMQCTL (e.g. "sudo rabbitmqctl") to run rabbitmqctl otherwise.
#
# Then: chimed's CHIME_REPLY_USERS=GROUP=USER,... (printed at the end) and each app's
# consumers CHIME_SCHEDULER_USER=<scheduler user>.
set -euo pipefail

rmqctl() { ${RABBITMQCTL:-command rabbitmqctl} "$@"; }

vhost="" scheduler="" password_dir="./rabbitmq-passwords"
apps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --vhost) vhost="$2"; shift 2 ;;
    --scheduler) scheduler="$2"; shift 2 ;;
    --app) apps+=("$2"); shift 2 ;;
    --password-dir) password_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$vhost" ] && [ -n "$scheduler" ] || { echo "--vhost and --scheduler are required" >&2; exit 2; }

name_re='^[A-Za-z0-9][A-Za-z0-9_-]*$'
ensure_user() {
  local user="$1" file="$password_dir/$1"
  if rmqctl list_users --quiet --no-table-headers | cut -f1 | grep -qxF "$user"; then
    echo "user $user exists; keeping its password"
    return
  fi
  mkdir -p "$password_dir"
  chmod 700 "$password_dir"
  if [ ! -s "$file" ]; then
    (umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=\n' > "$file")
  fi
  # The password goes through stdin, never the command line (visible in ps).
  rmqctl add_user "$user" < "$file" > /dev/null
  echo "created user $user (password in $file)"
}

rmqctl list_vhosts --quiet --no-table-headers | grep -qxF "$vhost" || rmqctl add_vhost "$vhost"

# chimed declares and owns every chime.* resource: it publishes tasks, observer copies
# and dead letters, consumes replies and dead-letter notices, and peeks, replays and
# purges dead-letter queues.
ensure_user "$scheduler"
rmqctl set_permissions -p "$vhost" "$scheduler" '^chime\..*' '^chime\..*' '^chime\..*'
rmqctl set_topic_permissions -p "$vhost" "$scheduler" chime.topics '.*' '.*'

reply_users=""
for spec in "${apps[@]}"; do
  IFS=: read -r user app groups extra <<< "$spec"
  [ -n "$user" ] && [ -n "$app" ] && [ -n "$groups" ] || { echo "--app wants USER:APP:GROUP[,GROUP...][:broadcast][:observe]: $spec" >&2; exit 2; }
  [[ "$app" =~ $name_re ]] || { echo "invalid app name: $app" >&2; exit 2; }
  broadcast=false observe=false
  IFS=: read -ra options <<< "${extra:-}"
  for option in "${options[@]}"; do
    case "$option" in
      broadcast) broadcast=true ;;
      observe) observe=true ;;
      *) echo "unknown option $option in --app $spec (broadcast, observe)" >&2; exit 2 ;;
    esac
  done
  IFS=, read -ra group_list <<< "$groups"
  for group in "${group_list[@]}"; do
    [[ "$group" =~ $name_re ]] || { echo "invalid group name: $group" >&2; exit 2; }
    reply_users="${reply_users:+$reply_users,}$group=$user"
  done
  g="($(IFS='|'; echo "${group_list[*]}"))"
  # Queues it consumes but chimed declares: its groups' work and zone queues, and the
  # stream of cancel notices (every consumer reads it to skip or stop cancelled runs).
  consumed="chime\.group\.$g(\.zone\.[A-Za-z0-9_-]+)?|chime\.cancels"
  # Queues it declares itself, and exchanges it binds them to.
  owned="" sources=""
  if $broadcast; then
    owned="${owned:+$owned|}chime\.broadcast\.$g\.[!-~]+"
    sources="${sources:+$sources|}chime\.broadcast"
  fi
  if $observe; then
    owned="${owned:+$owned|}chime\.observe\.$app(-[!-~]*)?(\.dlq)?"
    # chime.dlx: an observer binds its own dead-letter queue there.
    sources="${sources:+$sources|}chime\.topics|chime\.dlx"
  fi
  ensure_user "$user"
  # configure: only the queues it declares (a configure right on a shared name would let
  #            it delete that exchange or queue for everyone).
  # write:     publish replies (exchange chime.replies); with queues of its own, bind them
  #            as destinations and name chime.dlx as their dead-letter exchange (RabbitMQ
  #            requires write on it of whoever declares such a queue).
  # read:      consume its groups' queues, the cancel notices and its own queues; bind
  #            its own queues to sources.
  configure='^$'
  [ -z "$owned" ] || configure="^($owned)\$"
  rmqctl set_permissions -p "$vhost" "$user" \
    "$configure" \
    "^(chime\.replies${owned:+|chime\.dlx|$owned})\$" \
    "^($consumed${owned:+|$owned}${sources:+|$sources})\$"
  if $observe; then
    # Observers may bind only to their app's tasks; apps publish nothing there.
    rmqctl set_topic_permissions -p "$vhost" "$user" chime.topics '^$' "^$app\\..*"
  else
    rmqctl set_topic_permissions -p "$vhost" "$user" chime.topics '^$' '^$'
  fi
done

echo
echo "chimed: CHIME_REPLY_USERS=$reply_users"
echo "consumers: CHIME_SCHEDULER_USER=$scheduler"
