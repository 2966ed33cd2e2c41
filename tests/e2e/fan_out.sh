#!/usr/bin/env bash
# A few trainers feeding many replicas, live: one trainer node (dsv3-mini, PP1xEP2) and four
# inference nodes (TP2 each, DP4; 2 GPUs per node), a refitd per node, UCX between them.
# reshard relays: the trainer node's refitd sends about one copy of the weights, the
# inference nodes forward the rest among themselves, and every inference rank checks every
# byte of every version.
#   fan_out.sh BIN_DIR [VERSIONS]
set -euo pipefail
bin=$1
versions=${2:-2}
source "$(dirname "$0")/cluster.sh"
open_work fanout

model=dsv3-mini src=pp=1,ep=2 dst=tp=2,dp=4
trainer=train-node-0
inferences=(infer-node-0 infer-node-1 infer-node-2 infer-node-3)
ranks=("$bin/refit-synthetic-ranks" --model="$model" --source_parallel="$src"
       --destination_parallel="$dst" --gpus_per_node=2)
# The job leaves the choice to the planner (strategy auto): it must pick reshard's relays.
cat > "$work/job.json" <<JSON
{"name": "fanout", "model": "$model", "sourceParallel": "$src", "destinationParallel": "$dst",
 "epochDeadlineMs": 120000, "strategy": "auto"}
JSON
start_coordinator "$work/job.json"
start_daemons "$trainer" "${inferences[@]}"

# The plan the coordinator will make relays (refitctl plans the same job offline).
"$bin/refitctl" plan --model "$model" --src-parallel "$src" --dst-parallel "$dst" \
  --gpus-per-node 2 --strategy auto > "$work/plan.txt"
grep -q "^relays .* forwarded domain to domain" "$work/plan.txt" || { cat "$work/plan.txt"; exit 1; }
grep -q "^chosen  *reshard_relays .*, over .*gather_broadcast" "$work/plan.txt" ||
  { cat "$work/plan.txt"; exit 1; }

waiting=()
start_inference_ranks 8 "${inferences[@]}"
"${ranks[@]}" --side=source --host="$trainer" --socket="$work/$trainer.sock" \
  --coordinator="$coordinator" --versions="$versions" --ack_dir="$work" \
  --ack_from="${#inferences[@]}" > "$work/trainer-ranks.log" 2>&1 &
waiting+=($!)
await_verified "$versions" "${inferences[@]}"

# bytes_of NODE DIRECTION [PEER_PATTERN]: what NODE's refitd counts in
# refitd_peer_bytes_total for DIRECTION, summed over peers matching PEER_PATTERN.
# (0 where none matches: the last node of a chain forwards nothing.)
bytes_of() {
  http_get /metrics "${daemon_metrics_port[$1]}" |
    awk -v direction="direction=\"$2\"" -v peer="peer=\"${3:-[^\"]*}\"" '
      /^refitd_peer_bytes_total\{/ && index($0, direction) && match($0, peer) { sum += $NF }
      END { printf "%.0f\n", sum }'
}
# Each inference node receives one replica's worth of weights per version; the trainer
# node sends about that too (not four times it), and the inference nodes forward.
one_copy=$(bytes_of infer-node-0 received)
sent=$(bytes_of "$trainer" sent)
forwarded=0
for node in "${inferences[@]}"; do
  forwarded=$((forwarded + $(bytes_of "$node" sent "infer-node-[0-9]")))
done
echo "per replica $one_copy bytes; trainer node sent $sent; inference nodes forwarded $forwarded"
((one_copy > 0)) || { echo "infer-node-0 received nothing" >&2; exit 1; }
((sent * 10 <= one_copy * 12)) ||
  { echo "the trainer node sent $sent bytes, more than 1.2 copies of $one_copy" >&2; exit 1; }
((forwarded * 10 >= one_copy * 25)) ||
  { echo "the inference nodes forwarded only $forwarded bytes" >&2; exit 1; }

stop_all
echo "fan-out: $versions versions of $model to 4 replicas verified byte for byte, relayed"
