#!/usr/bin/env bash
# SIGTERM to a refitd in the middle of an epoch: the daemon interrupts its data plane,
# reports the interrupted epoch to the coordinator and exits; the coordinator aborts the
# epoch on the other daemon; Refit fails at once naming the node; no inference rank sees
# the new version.
#   shutdown_mid_epoch.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work stop
trainer=train-node-0
inference=infer-node-0

# gather_broadcast moves the mini model in several seconds: a wide window to stop it in.
cat > "$work/job.json" <<JSON
{"name": "stop", "model": "dsv3-mini", "sourceParallel": "pp=2,ep=2",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 60000, "strategy": "gather_broadcast"}
JSON
start_coordinator "$work/job.json"
start_daemons "$trainer" "$inference"
"$bin/refit-synthetic-ranks" --side=destination --refit=mini --host="$inference" \
  --socket="$work/$inference.sock" --versions=1 > "$work/inference-ranks.log" 2>&1 &
inference_ranks=$!
pids+=($inference_ranks)
for _ in $(seq 300); do destinations_seen 4 && break; sleep 0.1; done
destinations_seen 4 || { cat "$work/inference-ranks.log"; exit 1; }
"$bin/refit-synthetic-ranks" --side=source --refit=mini --host="$trainer" \
  --socket="$work/$trainer.sock" --coordinator="$coordinator" --versions=1 \
  > "$work/trainer-ranks.log" 2>&1 &
trainer_ranks=$!
pids+=($trainer_ranks)

for _ in $(seq 600); do grep -q "epoch stop-1 (version 1) started" "$work/$inference.log" && break; sleep 0.1; done
grep -q "epoch stop-1 (version 1) started" "$work/$inference.log" || { cat "$work"/*.log; exit 1; }
sleep 0.5
kill -TERM "${daemon_pid[$inference]}"
stopped=$(date +%s%N)
await_exit "${daemon_pid[$inference]}" 5
# The trainer side's Refit fails long before the epoch deadline (60 s), naming the node.
await_exit "$trainer_ranks" 10
if wait "$trainer_ranks"; then echo "the refit succeeded although a daemon stopped" >&2; exit 1; fi
echo "refit failed $(( ($(date +%s%N) - stopped) / 1000000 )) ms after SIGTERM:"
cat "$work/trainer-ranks.log"
grep -q "refitd on $inference failed: refitd is shutting down; the epoch was interrupted" "$work/trainer-ranks.log"
grep -q "epoch stop-1 version 1 aborted" "$work/coordinator.log"
# The trainer's daemon's part of the epoch stopped too: the coordinator's abort interrupted
# it, or it had already failed by itself when its peer's data-plane endpoint went away
# (the abort then finds nothing running). Either is logged.
trainer_stopped="coordinator aborted epoch stop-1\|epoch stop-1 failed after"
for _ in $(seq 50); do grep -q "$trainer_stopped" "$work/$trainer.log" && break; sleep 0.1; done
grep -q "$trainer_stopped" "$work/$trainer.log" || { cat "$work/$trainer.log"; exit 1; }
# No inference rank was told that version 1 arrived.
await_exit "$inference_ranks" 10
if grep -q "^version 1:" "$work/inference-ranks.log"; then
  echo "an inference rank saw version 1" >&2
  exit 1
fi
"$bin/refitctl" status --coordinator="$coordinator" | grep -q "^current version  -1$"
stop_all
echo "shutdown mid-epoch: interrupted, reported and aborted"
