#!/usr/bin/env bash
# Relay buffers, live: two trainer nodes (dsv3-mini, PP2xEP4, one stage on each node's four
# GPUs) and one inference node (TP2 on two GPUs), a refitd per node, UCX between them. The
# job's topology puts train-node-1 and infer-node-0 in one NVLink domain (a shared tray),
# so the stage-0 layers, which only train-node-0 holds, cross the network partly into relay
# buffers on train-node-1, whose four NICs would otherwise receive nothing, and go on to
# infer-node-0 from there: six NICs receive what two would. Every inference rank checks
# every byte of every version; train-node-1 received exactly the plan's relay-buffer bytes
# from train-node-0.
#   relay_buffers.sh BIN_DIR [VERSIONS]
set -euo pipefail
bin=$1
versions=${2:-2}
source "$(dirname "$0")/cluster.sh"
open_work relaybuffers

model=dsv3-mini src=pp=2,ep=4 dst=tp=2,dp=1
trainers=(train-node-0 train-node-1)
inferences=(infer-node-0)
ranks=("$bin/refit-synthetic-ranks" --model="$model" --source_parallel="$src"
       --destination_parallel="$dst" --gpus_per_node=4)
topology='{"name": "shared-tray", "hosts": [
  {"host": "train-node-1", "nvlinkDomain": "tray-a"},
  {"host": "infer-node-0", "nvlinkDomain": "tray-a"}]}'
echo "$topology" > "$work/topology.json"
cat > "$work/job.json" <<JSON
{"name": "relaybuffers", "model": "$model", "sourceParallel": "$src",
 "destinationParallel": "$dst", "epochDeadlineMs": 120000, "topology": $topology}
JSON
start_coordinator "$work/job.json"
start_daemons "${trainers[@]}" "${inferences[@]}"

# The plan the coordinator will make sends pieces through relay buffers (refitctl plans the
# same job offline): how many bytes per version.
"$bin/refitctl" plan --model "$model" --src-parallel "$src" --dst-parallel "$dst" \
  --gpus-per-node 4 --topology "$work/topology.json" --json > "$work/plan.json"
per_version=$(tr ',' '\n' < "$work/plan.json" | sed -n 's/^ *"relay_buffer_bytes": *\([0-9]*\)$/\1/p')
((${per_version:-0} > 0)) || { cat "$work/plan.json"; echo "the plan uses no relay buffers" >&2; exit 1; }

waiting=()
start_inference_ranks 2 "${inferences[@]}"
# Both trainer nodes publish each version; the first also asks for the refit (the
# coordinator waits for every source rank to publish before it runs the epoch).
for node in "${trainers[@]}"; do
  flags=()
  [[ $node == train-node-0 ]] && flags=(--coordinator="$coordinator")
  "${ranks[@]}" --side=source --host="$node" --socket="$work/$node.sock" "${flags[@]}" \
    --versions="$versions" --ack_dir="$work" --ack_from="${#inferences[@]}" \
    > "$work/trainer-ranks-$node.log" 2>&1 &
  waiting+=($!)
done
await_verified "$versions" "${inferences[@]}"

metric() { http_get /metrics "${daemon_metrics_port[$1]}"; }
# Trainers receive nothing but relay-buffer fills: train-node-1 got exactly the plan's
# relay-buffer bytes of every version from train-node-0, and held some of them at once.
received=$(metric train-node-1 | awk '/^refitd_peer_bytes_total\{/ && /direction="received"/ &&
  /peer="train-node-0"/ { sum += $NF } END { printf "%.0f\n", sum }')
peak=$(metric train-node-1 | awk '/^refitd_relay_buffer_peak_bytes/ { printf "%.0f\n", $NF }')
echo "relay buffers: $per_version bytes per version planned; train-node-1 received $received" \
  "from train-node-0 in $versions versions, held at most $peak at once"
((received == per_version * versions)) ||
  { echo "train-node-1 received $received bytes, not $versions x $per_version" >&2; exit 1; }
((peak > 0 && peak <= per_version)) ||
  { echo "train-node-1 held $peak relay-buffer bytes at most" >&2; exit 1; }
# A daemon that never hosts a relay buffer says 0.
peak_elsewhere=$(metric infer-node-0 | awk '/^refitd_relay_buffer_peak_bytes/ { printf "%.0f\n", $NF }')
((peak_elsewhere == 0)) || { echo "infer-node-0 held relay buffers ($peak_elsewhere)" >&2; exit 1; }
! grep -q "relay buffers allocated" "$work"/train-node-*.log

stop_all
echo "relay buffers: $versions versions of $model verified byte for byte through a shared tray"
