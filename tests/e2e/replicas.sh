#!/usr/bin/env bash
# Inference replicas that come and go, live: one trainer node (dsv3-mini, PP1xEP2) and four
# inference nodes, each one replica (TP2; DP4 in all), a refitd per node, UCX between them.
# The job names replicas as members (destinationReplicas, at least 2), not a fixed count:
#   1. three replicas are there: version 1 goes to them (replica 3 is listed absent);
#   2. replica 3 comes: it catches up to version 1 in an epoch of its own, from the sources;
#   3. during the epoch of version 2 the refitd of replica 1 is killed: replica 1 is dropped,
#      the epoch runs again for the other three and they commit (the report names it);
#   4. replica 1 comes back (a new refitd, new ranks): it catches up to version 2;
#   5. version 3 goes to all four.
# Every inference rank checks every byte of each version it is told arrived. The trainer
# ranks hold each version until all four replicas acknowledged it, so the sources still
# hold the version a replica catches up to.
#   replicas.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work replicas

model=dsv3-mini src=pp=1,ep=2 dst=tp=2,dp=4
trainer=train-node-0
inferences=(infer-node-0 infer-node-1 infer-node-2 infer-node-3)
ranks=("$bin/refit-synthetic-ranks" --model="$model" --source_parallel="$src"
       --destination_parallel="$dst" --gpus_per_node=2 --timeout_ms=120000)
# reshard: the inference nodes forward to one another, so a replica lost during an epoch
# leaves the others without some of their pieces. The lease (5 s) is far longer than the
# time from asking a refit to the epoch's start, so a daemon stopped as the refit is asked
# is lost during the epoch, not before it.
cat > "$work/job.json" <<JSON
{"name": "replicas", "model": "$model", "sourceParallel": "$src", "destinationParallel": "$dst",
 "destinationReplicas": {"minReplicas": 2}, "epochDeadlineMs": 120000, "leaseMs": 5000,
 "strategy": "reshard"}
JSON
start_coordinator "$work/job.json"
start_daemons "$trainer" "${inferences[@]}"

# replica_ranks NODE FIRST_VERSION: NODE's inference ranks, waiting for versions
# FIRST_VERSION to 3 and acknowledging each; pid in replica_pid[NODE].
declare -A replica_pid
replica_ranks() {
  "${ranks[@]}" --side=destination --host="$1" --socket="$work/$1.sock" --first_version="$2" \
    --versions=$((4 - $2)) --ack_dir="$work" >> "$work/inference-ranks-$1.log" 2>&1 &
  replica_pid[$1]=$!
  pids+=($!)
}
# verified NODE VERSION: NODE's inference ranks found no byte wrong in VERSION.
verified() {
  expect_in "$work/inference-ranks-$1.log" "version $2: 0 of" 60 ||
    { cat "$work/inference-ranks-$1.log" >&2; return 1; }
}
# metric NAME_AND_LABELS: the coordinator's value of that series.
metric() {
  http_get /metrics | awk -v series="$1" '$1 == series { print $2 }'
}
status() { "$bin/refitctl" status --coordinator="$coordinator"; }

# 1. Three replicas; the trainer publishes version 1 and holds each version until four
#    replicas acknowledged it.
for node in infer-node-0 infer-node-1 infer-node-2; do replica_ranks "$node" 1; done
for _ in $(seq 300); do destinations_seen 6 && break; sleep 0.1; done
destinations_seen 6
"${ranks[@]}" --side=source --host="$trainer" --socket="$work/$trainer.sock" --versions=3 \
  --ack_dir="$work" --ack_from=4 > "$work/trainer-ranks.log" 2>&1 &
trainer_ranks=$!
pids+=($trainer_ranks)
for _ in $(seq 300); do sources_seen 2 && break; sleep 0.1; done
"$bin/refitctl" refit --coordinator="$coordinator" --version=1 --timeout-ms=120000 \
  > "$work/refit-1.txt" 2> "$work/refit-1.err"
grep -q "to replicas 0, 1, 2$" "$work/refit-1.txt" || { cat "$work/refit-1.txt"; exit 1; }
for node in infer-node-0 infer-node-1 infer-node-2; do verified "$node" 1; done
status > "$work/status-1.txt"
grep -qE "^  3 +absent +missing ranks 6, 7" "$work/status-1.txt" || { cat "$work/status-1.txt"; exit 1; }
grep -qE "^  0 +current +on infer-node-0" "$work/status-1.txt" || { cat "$work/status-1.txt"; exit 1; }

# 2. Replica 3 joins and catches up to version 1 by itself.
replica_ranks infer-node-3 1
verified infer-node-3 1
expect_in "$work/coordinator.log" "version 1 committed (a catch-up) to replica 3" 10
expect_in "$work/coordinator.log" "replica 3 lacks the committed version 1: catching up" 1
[[ $(metric 'refit_catch_ups_total{result="committed"}') == 1 ]]

# 3. Version 2: the refitd of replica 1 stops (SIGSTOP) as the refit is asked, so its part
# of the epoch cannot end however fast the others' parts are: the coordinator loses it during
# the epoch (its lease runs out), drops replica 1 and runs the epoch again for the other
# three. Then the stopped refitd is killed.
kill -STOP "${daemon_pid[infer-node-1]}"
"$bin/refitctl" refit --coordinator="$coordinator" --version=2 --timeout-ms=120000 \
  > "$work/refit-2.txt" 2> "$work/refit-2.err" ||
  { cat "$work/refit-2.txt" "$work/refit-2.err"; exit 1; }
kill -KILL "${daemon_pid[infer-node-1]}"
grep -q "to replicas 0, 2, 3; dropped replicas 1 (lost during the epoch)" "$work/refit-2.txt" ||
  { cat "$work/refit-2.txt"; grep "version 2" "$work/coordinator.log"; exit 1; }
for node in infer-node-0 infer-node-2 infer-node-3; do verified "$node" 2; done
# Waiters of the surviving replicas were not told of the aborted attempt.
if grep -q "was aborted" "$work"/inference-ranks-infer-node-[023].log; then
  echo "a surviving replica heard of the aborted attempt" >&2
  exit 1
fi
[[ $(metric 'refit_replicas_dropped_total') == 1 ]]
kill -TERM "${replica_pid[infer-node-1]}" 2>/dev/null || true
await_exit "${replica_pid[infer-node-1]}" 10

# 4. Replica 1 comes back: a new refitd and new ranks; it catches up to version 2.
start_daemons infer-node-1
replica_ranks infer-node-1 2
verified infer-node-1 2
[[ $(metric 'refit_catch_ups_total{result="committed"}') == 2 ]]
status > "$work/status-2.txt"
grep -q "^replicas  *4 current$" "$work/status-2.txt" || { cat "$work/status-2.txt"; exit 1; }
[[ $(metric 'refit_destination_replicas{state="current"}') == 4 ]]

# 5. Version 3 to all four (asked with --json: the report alone, on stdout).
"$bin/refitctl" refit --coordinator="$coordinator" --version=3 --timeout-ms=120000 --json \
  > "$work/refit-3.json" 2> "$work/refit-3.err"
[[ ! -s $work/refit-3.err ]] || { echo "refitctl refit --json wrote to stderr:" >&2; cat "$work/refit-3.err"; exit 1; }
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert [int(x) for x in r["replicas"]] == [0, 1, 2, 3] and "dropped_replicas" not in r, r' \
  "$work/refit-3.json"
for node in "${inferences[@]}"; do verified "$node" 3; done
await_exit "$trainer_ranks" 60
wait "$trainer_ranks"
stop_all
echo "replicas: 3 then 4 replicas, one caught up, one lost mid-epoch and dropped, then caught up"
