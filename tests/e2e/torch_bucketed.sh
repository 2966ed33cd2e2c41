#!/usr/bin/env bash
# The bucketed path with the Python client: two Megatron-style TP trainer processes
# (registered in place) feed a vLLM-style engine whose weights move (re-created before
# every version), registered bucketed with 1 MiB buckets. Three optimizer steps, a refit
# after each; every engine parameter is compared with torch.equal against the trainers'
# shards fused the engine's way; the weights (66 MB) arrive in many buckets, pieces larger
# than a bucket among them, and registering grows the engine by no copy of its weights.
#   torch_bucketed.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work bucketed
use_python_client

cat > "$work/job.json" << JSON
{"name": "bucketed", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 30000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node

run_dense_example dense_bucketed_inference.py -- --bucket-bytes=1048576
cat "$work"/dense-trainer-*.log "$work/inference.log"
weights=$(sed -nE 's/^inference: ([0-9]+) bytes of weights.*/\1/p' "$work/inference.log")
for version in 1 2 3; do
  line=$(grep "^version $version: 54 engine parameters equal to the trainers' weights" \
    "$work/inference.log")
  moved=$(sed -E 's/.*, ([0-9]+) bytes in ([0-9]+) buckets/\1/' <<< "$line")
  buckets=$(sed -E 's/.*, ([0-9]+) bytes in ([0-9]+) buckets/\2/' <<< "$line")
  # Every byte of the weights came through the buckets, in at least one bucket per MiB.
  if ((moved != weights || buckets < weights / 1048576)); then
    echo "version $version: $moved of $weights bytes in $buckets buckets" >&2
    false
  fi
done
line=$(grep "registered bucketed" "$work/inference.log")
grown=$(sed -E 's/.*grew by (-?[0-9]+) bytes/\1/' <<< "$line")
if ((grown > 8 * 1024 * 1024)); then
  echo "registering grew the engine by $grown bytes: more than its buckets" >&2
  false
fi
# Each piece was hashed as it was handed to a bucket and compared with its source end.
for version in 1 2 3; do
  grep -E "version $version .* [1-9][0-9]* pieces checksummed" "$work/coordinator.log" > /dev/null ||
    { grep "checksummed" "$work/coordinator.log" >&2; false; }
done
stop_all
echo "torch bucketed: three versions through 1 MiB buckets into re-created engine weights, equal"
