#!/usr/bin/env bash
# Creates Chime's RabbitMQ users on one vhost with the permissions each needs:
# the scheduler's user (chimed), and one user per app for its consumers and observers.
# See docs/security.md, "Authenticated messages".
#
# Usage:
#   deploy/rabbitmq/permissions.sh --vhost VHOST --scheduler USER \
#       --app USER:APP:GROUP[,GROUP...] [--app ...] [--password-dir DIR]
#
#   --vhost         the vhost (created if missing), e.g. / or chime
#   --scheduler     chimed's user (its amqp_url names it)
#   --app           an app's user, the app name its jobs use (observers may bind only to
#                   APP.# on chime.topics, and their names must be APP or APP-...), and the
#                   consumer groups its consumers serve
#   --password-dir  where each new user's password is read from (DIR/USER), or written to
#                   (random, mode 0600) when the file is missing; default ./rabbitmq-passwords
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
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
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
exchanges='chime\.(tasks|replies|dlx|broadcast|topics)'
for spec in "${apps[@]}"; do
  IFS=: read -r user app groups <<< "$spec"
  [ -n "$user" ] && [ -n "$app" ] && [ -n "$groups" ] || { echo "--app wants USER:APP:GROUP[,GROUP...]: $spec" >&2; exit 2; }
  [[ "$app" =~ $name_re ]] || { echo "invalid app name: $app" >&2; exit 2; }
  IFS=, read -ra group_list <<< "$groups"
  for group in "${group_list[@]}"; do
    [[ "$group" =~ $name_re ]] || { echo "invalid group name: $group" >&2; exit 2; }
    reply_users="${reply_users:+$reply_users,}$group=$user"
  done
  g="($(IFS='|'; echo "${group_list[*]}"))"
  # Its groups' work, zone and broadcast queues and their dead-letter queue, and its
  # observers' queues (observer names APP or APP-...).
  own="chime\.group\.$g(\.zone\.[A-Za-z0-9_-]+)?(\.dlq)?|chime\.broadcast\.$g\.[!-~]+|chime\.observe\.$app(-[!-~]*)?(\.dlq)?"
  ensure_user "$user"
  # configure: the library declares the exchanges, the reply queue and its own queues
  #            on connect (idempotent declarations still need configure).
  # write:     publish replies (exchange chime.replies); bind its own queues (and the
  #            reply queue) as destinations; chime.dlx, which RabbitMQ requires of whoever
  #            declares a queue that dead-letters there.
  # read:      consume its own queues; bind from chime.tasks, chime.broadcast,
  #            chime.topics, chime.dlx and chime.replies.
  rmqctl set_permissions -p "$vhost" "$user" \
    "^($exchanges|chime\.replies\.dlq|$own)\$" \
    "^(chime\.(replies|dlx)|chime\.replies\.dlq|$own)\$" \
    "^($exchanges|$own)\$"
  # Observers may bind only to their app's tasks; apps publish nothing there.
  rmqctl set_topic_permissions -p "$vhost" "$user" chime.topics '^$' "^$app\\..*"
done

echo
echo "chimed: CHIME_REPLY_USERS=$reply_users"
echo "consumers: CHIME_SCHEDULER_USER=$scheduler"
