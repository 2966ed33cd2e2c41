#!/usr/bin/env bash
# What the bucketed path costs in refit time: the dense example (two TP trainer processes
# registered in place, a vLLM-style engine with two TP ranks, 65 MB of weights) refit
# STEPS times with the engine registered in place, then bucketed with 1 MiB and 16 MiB
# buckets (an engine whose weights move), each on a fresh coordinator and daemons, side by
# side in one run. Prints the median refit seconds of each (the first epoch, which plans,
# left out) and its ratio to in place.
#   client/python/examples/bench_bucketed.sh BIN_DIR [STEPS]
set -euo pipefail
bin=$(cd "$1" && pwd)
steps=${2:-8}
here=$(cd "$(dirname "$0")/../../.." && pwd)
source "$here/tests/e2e/cluster.sh"

# run_mode ENGINE_SCRIPT [ENGINE_ARGS...]: prints the median refit seconds of versions 2..STEPS.
run_mode() {
  open_work bench-bucketed
  use_python_client
  cat > "$work/job.json" << JSON
{"name": "bench", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 60000}
JSON
  start_coordinator "$work/job.json"
  start_daemons trainer-node inference-node
  run_dense_example "$1" --steps="$steps" -- "${@:2}" || exit 1
  sed -nE 's/^version ([0-9]+): [0-9]+ bytes in ([0-9.]+) s$/\1 \2/p' "$work/dense-trainer-0.log" |
    awk '$1 > 1 { print $2 }' | sort -n |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
  stop_all
  rm -rf "$work"
}

in_place=$(run_mode dense_inference.py)
small=$(run_mode dense_bucketed_inference.py --bucket-bytes=1048576)
large=$(run_mode dense_bucketed_inference.py --bucket-bytes=16777216)
printf '%-24s %10s %12s\n' engine "refit s" "/ in place"
printf '%-24s %10.3f %12.2f\n' "in place" "$in_place" 1
printf '%-24s %10.3f %12.2f\n' "bucketed, 1 MiB" "$small" "$(awk "BEGIN { print $small / $in_place }")"
printf '%-24s %10.3f %12.2f\n' "bucketed, 16 MiB" "$large" "$(awk "BEGIN { print $large / $in_place }")"
