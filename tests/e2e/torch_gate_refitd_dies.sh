#!/usr/bin/env bash
# An engine whose refitd dies while it is paused for a write: the dense model's vLLM-style
# engine (two TP ranks, parameters in place) generates all along inside refit.WriteGate
# (torch_gate_refitd_dies.py). Its rank 0 pauses for version 1, its rank 1 is slow to, and
# there the inference node's refitd is killed (SIGKILL). The write counts as aborted: the
# generation loop takes a step again within 5 s, on_abort names refitd going away, and the
# client says refitd is lost. Then refitd restarts, the engine registers its ranks again
# (a new LocalDaemon, as client/python/README.md says), and the next refit of version 1
# writes every engine parameter while no generation step sees its weights change.
#   torch_gate_refitd_dies.sh BIN_DIR
set -euo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
open_work gate-refitd-dies
use_python_client

# A 10 s pause deadline: rank 1 holds the first epoch that long, then the refit fails.
cat > "$work/job.json" << JSON
{"name": "gate", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 30000,
 "pauseDeadlineMs": 10000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node

"$python" "$here/torch_gate_refitd_dies.py" --socket="$work/inference-node.sock" --out="$work" \
  > "$work/inference.log" 2>&1 &
engine=$!
pids+=($engine)
for _ in $(seq 300); do destinations_seen 2 && break; sleep 0.1; done
destinations_seen 2 || { cat "$work/inference.log" >&2; exit 1; }
# The trainers publish version 1 and wait for the engine to check it.
trainers=()
for tp_rank in 0 1; do
  "$python" "$client/examples/dense_trainer.py" --socket="$work/trainer-node.sock" \
    --tp-rank=$tp_rank --out="$work" --steps=1 > "$work/dense-trainer-$tp_rank.log" 2>&1 &
  trainers+=($!)
  pids+=($!)
done
for _ in $(seq 300); do sources_seen 2 && break; sleep 0.1; done
sources_seen 2 || { cat "$work"/dense-trainer-*.log >&2; exit 1; }

"$bin/refitctl" refit --coordinator="$coordinator" --version=1 --timeout-ms=60000 \
  > "$work/refit-1.log" 2>&1 &
first_refit=$!
pids+=($first_refit)
expect_in "$work/inference.log" "rank 0 paused for version 1" 60
kill -KILL "${daemon_pid[inference-node]}"
killed=$(date +%s%N)
expect_in "$work/inference.log" "generation stepped again" 5
echo "generation stepped again $(( ($(date +%s%N) - killed) / 1000000 )) ms after refitd died"
grep -q "; 0 steps while rank 0 was paused$" "$work/inference.log" ||
  { cat "$work/inference.log" >&2; exit 1; }
for rank in 0 1; do
  grep -q "^rank $rank: on_abort(1): refitd went away: UNAVAILABLE" "$work/inference.log" ||
    { cat "$work/inference.log" >&2; exit 1; }
done
grep -q "^refitd_lost: UNAVAILABLE: rank [01]: refitd went away" "$work/inference.log"
grep -q "^wait_for_version: RefitUnavailable: UNAVAILABLE: rank 0: refitd went away" \
  "$work/inference.log"
# The first refit ends at the pause deadline, without version 1.
await_exit "$first_refit" 30
if wait "$first_refit"; then
  echo "the refit of version 1 succeeded without the inference node" >&2
  exit 1
fi

start_daemons inference-node
expect_in "$work/inference.log" "registered again" 30
for _ in $(seq 300); do destinations_seen 2 && break; sleep 0.1; done
destinations_seen 2 || { cat "$work/inference.log" >&2; exit 1; }
"$bin/refitctl" refit --coordinator="$coordinator" --version=1 --timeout-ms=60000 \
  > "$work/refit-2.log" 2>&1 || { cat "$work/refit-2.log" "$work/inference.log" >&2; exit 1; }
for pid in "$engine" "${trainers[@]}"; do
  await_exit "$pid" 60
  wait "$pid" || { cat "$work"/dense-trainer-*.log "$work/inference.log" >&2; exit 1; }
done
grep -q "^version 1: 54 engine parameters equal to the trainers' weights" "$work/inference.log"
grep -qE "^generation: [1-9][0-9]* steps, 0 saw their weights change; last version committed 1$" \
  "$work/inference.log" || { cat "$work/inference.log" >&2; exit 1; }
stop_all
echo "torch gate refitd dies: generation went on after refitd died mid-write; version 1 went" \
  "through once the engine registered again"
