#!/usr/bin/env bash
# The Python client with the frameworks' own tensors, registered in place: two
# Megatron-style tensor-parallel trainer processes, each holding only its shards of a dense
# Llama-style model, and a vLLM-style engine process with two TP ranks holding fused
# qkv_proj and gate_up_proj parameters. Three optimizer steps, a refit after each; every
# engine parameter is compared with torch.equal against the trainers' shards fused the
# engine's way, and registering grows no process's resident memory by a copy of its weights.
#   torch_in_place.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work in-place
use_python_client

cat > "$work/job.json" << JSON
{"name": "in-place", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 30000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node

run_dense_example dense_inference.py
cat "$work"/dense-trainer-*.log "$work/inference.log"
for version in 1 2 3; do
  grep -q "^version $version: 54 engine parameters equal to the trainers' weights" \
    "$work/inference.log"
done
# In place: a process's resident memory grows by less than 8 MiB when it registers, where a
# copy of its weights (33 MB a trainer, 66 MB the engine) would add that much.
for log in "$work"/dense-trainer-*.log "$work/inference.log"; do
  line=$(grep "bytes registered in place" "$log")
  held=$(sed -E 's/.*: ([0-9]+) bytes registered.*/\1/' <<< "$line")
  grown=$(sed -E 's/.*grew by (-?[0-9]+) bytes/\1/' <<< "$line")
  if ((held < 30000000 || grown > 8 * 1024 * 1024)); then
    echo "$log: $line (a copy, not in place)" >&2
    false
  fi
done
stop_all
echo "torch in place: three versions from two TP trainers into fused engine parameters, equal"
