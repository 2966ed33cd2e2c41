#!/usr/bin/env bash
# An engine that pauses while refit writes its weights: the vLLM-style engine of the dense
# model (two TP ranks, parameters registered in place) generates all along on a thread,
# each step reading every parameter twice inside refit.WriteGate, and registers its ranks
# with the gate's hooks (RankLayout.pauses_for_writes). Three versions from two TP trainers:
# every epoch waits for the engine to pause, no generation step sees its weights change,
# and every parameter equals the trainers' weights of each version.
#   torch_pause.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work pause
use_python_client

cat > "$work/job.json" << JSON
{"name": "pause", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 30000,
 "pauseDeadlineMs": 20000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node

run_dense_example dense_inference.py -- --pause
for version in 1 2 3; do
  grep -q "^version $version: 54 engine parameters equal to the trainers' weights" \
    "$work/inference.log" || { cat "$work/inference.log"; exit 1; }
done
# Both ranks heard of each epoch before it wrote, and none was late.
grep -qE "^generation: [1-9][0-9]* steps, 0 saw their weights change; last version committed 3; paused for versions 1, 1, 2, 2, 3, 3$" \
  "$work/inference.log" || { cat "$work/inference.log"; exit 1; }
if grep -q "did not pause" "$work/coordinator.log"; then
  grep "did not pause" "$work/coordinator.log" >&2
  exit 1
fi
stop_all
echo "torch pause: three versions written while the engine paused; no step saw a change"
