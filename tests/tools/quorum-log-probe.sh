#!/usr/bin/env bash
# Samples a RabbitMQ node's quorum-queue log state every 200 ms, from inside the node, to
# see what a WAL rollover has to write out and when it happens (docs/benchmarks.md, "A
# stormy day for the broker"). Polling from outside with rabbitmq-queues costs a CLI
# start per sample and misses short events; this runs one Erlang process in the node.
#
# usage: tests/tools/quorum-log-probe.sh OUTFILE [SAMPLES]     (default 3000, ~10 min)
#   RABBITMQCTL   the rabbitmqctl command (default "rabbitmqctl"; e.g.
#                 "rabbitmqctl -n chimewal@localhost" for a private node)
#
# OUTFILE is written by the broker's own user, so its directory must be writable by it.
# It gets one line per fact and sample, "<tag> <unix ms> <fields...>":
#   W <ms> <wal file> <bytes>               each *.wal file in the node's quorum directory
#   O <ms> <ra uid> <first> <last> <bytes>  a queue's open memory table (entries first..last)
#   C <ms> <ra uid> <n> <first> <last> <bytes>  memory tables waiting for the segment writer
#   S <ms> <ra uid> <snapshot index>        entries up to it need not be written out
#   D <ms> <ra uid> <pid> <pid> <server> <cluster>  which queue a uid is (every 25th sample)
# A rollover is the sample where a new *.wal name appears; a queue's live entries at that
# moment are last - max(first - 1, snapshot index).
set -euo pipefail

out=${1:?usage: quorum-log-probe.sh OUTFILE [SAMPLES]}
samples=${2:-3000}
rabbitmqctl=${RABBITMQCTL:-rabbitmqctl}

# shellcheck disable=SC2016 # Erlang source, expanded by nothing but the node.
$rabbitmqctl eval "
Dir = filename:join([rabbit_mnesia:dir(), \"quorum\", atom_to_list(node())]),
Fmt = fun(X) when is_reference(X) ->
              case ets:info(X, memory) of M when is_integer(M) -> integer_to_list(M * 8); _ -> \"0\" end;
         (X) when is_integer(X) -> integer_to_list(X);
         (X) when is_binary(X) -> binary_to_list(X);
         (X) when is_atom(X) -> atom_to_list(X);
         (X) when is_pid(X) -> pid_to_list(X);
         (_) -> \"?\"
      end,
Line = fun(Tag, Now, T) -> [Tag, \" \", integer_to_list(Now), [[\" \", Fmt(X)] || X <- tuple_to_list(T)], \"\n\"] end,
Sample = fun(K) ->
    Now = erlang:system_time(millisecond),
    [[Line(\"O\", Now, T) || T <- ets:tab2list(ra_log_open_mem_tables)],
     [Line(\"C\", Now, T) || T <- ets:tab2list(ra_log_closed_mem_tables)],
     [Line(\"S\", Now, T) || T <- ets:tab2list(ra_log_snapshot_state)],
     case K rem 25 of 0 -> [Line(\"D\", Now, T) || T <- ets:tab2list(ra_directory)]; _ -> [] end,
     [Line(\"W\", Now, {list_to_binary(filename:basename(W)), filelib:file_size(W)})
      || W <- filelib:wildcard(filename:join(Dir, \"*.wal\"))]]
  end,
Loop = fun Loop(0) -> ok;
           Loop(K) ->
             Out = try Sample(K) catch _:Why -> io_lib:format(\"E ~b ~0p~n\", [erlang:system_time(millisecond), Why]) end,
             ok = file:write_file(\"$out\", Out, [append]),
             timer:sleep(200),
             Loop(K - 1)
       end,
spawn(fun() -> Loop($samples) end),
started."
echo "sampling into $out: $samples samples, one every 200 ms" >&2
