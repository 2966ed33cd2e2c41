#!/usr/bin/env bash
# A live refit on one machine with real processes: a coordinator, one refitd per node
# (trainer nodes and inference nodes, UCX between them), synthetic trainer ranks holding
# the sources in shared memory (one process per node) and synthetic inference ranks
# holding the destinations. Runs VERSIONS epochs; the inference ranks check every byte of
# every version. Everything is shut down with SIGTERM at the end.
#   live_refit.sh BIN_DIR [SETUP] [VERSIONS] [STRATEGY] [QUANTIZATION]
# SETUP: mini (dsv3-mini, 8 GPUs per node: one trainer node, one inference node), mini4
# (the same ranks at 2 GPUs per node: two trainer nodes, two inference nodes), or mini-fsdp
# (as mini, the trainers FSDP2 over 3 ranks: torch.chunk rows that cut 128-row blocks).
# QUANTIZATION: block_fp8 makes the inference ranks hold the layers' linear weights in FP8
# with 128 x 128 block scales; the trainers' daemons quantize, and the inference ranks check
# every code and scale against the quantization of what the trainers wrote.
set -euo pipefail
bin=$1
refit=${2:-mini}
versions=${3:-3}
strategy=${4:-reshard}
quantization=${5:-}
source "$(dirname "$0")/cluster.sh"
open_work live

# --help says what each program is and lists the flags of its main file (absl exits 1).
help=$("$bin/refit-coordinator" --help 2>&1 || true)
grep -q "^refit-coordinator: refit-coordinator --job=JOB.json" <<< "$help"
grep -q -- "--job (the refit group" <<< "$help" || { echo "$help" >&2; exit 1; }
help=$("$bin/refitd" --help 2>&1 || true)
grep -q -- "--coordinator (coordinator address" <<< "$help" || { echo "$help" >&2; exit 1; }

model=dsv3-mini src=pp=2,ep=2 dst=tp=2,dp=2 destinations=4
case $refit in
  mini) gpus=8 trainers=(train-node-0) inferences=(infer-node-0) ;;
  mini4) gpus=2 trainers=(train-node-0 train-node-1) inferences=(infer-node-0 infer-node-1) ;;
  mini-fsdp) gpus=8 src=fsdp=3 trainers=(train-node-0) inferences=(infer-node-0) ;;
  *) echo "live_refit.sh: no live setup $refit" >&2; exit 2 ;;
esac
trainer=${trainers[0]}
inference=${inferences[0]}
ranks=("$bin/refit-synthetic-ranks" --model="$model" --source_parallel="$src"
       --destination_parallel="$dst" --gpus_per_node="$gpus"
       --destination_quantization="$quantization")
# The job names the model and both parallel settings; the coordinator derives the ranks.
cat > "$work/job.json" <<JSON
{"name": "$refit", "model": "$model", "sourceParallel": "$src", "destinationParallel": "$dst",
 "epochDeadlineMs": 60000, "strategy": "$strategy"}
JSON

start_coordinator "$work/job.json"
http_get /healthz | grep "^ok" > /dev/null
http_get /readyz | grep "503" > /dev/null  # no ranks registered yet

start_daemons "${trainers[@]}" "${inferences[@]}"

inference_ranks=()
for node in "${inferences[@]}"; do
  "${ranks[@]}" --side=destination --host="$node" --socket="$work/$node.sock" \
    --versions="$versions" --ack_dir="$work" > "$work/inference-ranks-$node.log" 2>&1 &
  inference_ranks+=($!)
done
# The coordinator sees the inference ranks, placed on the inference node's daemon.
for _ in $(seq 300); do
  "$bin/refitctl" layouts --coordinator="$coordinator" > "$work/layouts.txt" 2>/dev/null || true
  grep -q "^destinations: $destinations ranks" "$work/layouts.txt" && break
  sleep 0.1
done
grep -q "^destinations: $destinations ranks" "$work/layouts.txt" || { cat "$work/layouts.txt"; exit 1; }
grep -q "on $inference$" "$work/layouts.txt"
# A line per node, the node's ranks as ranges; --ranks lists every rank.
per_node=$((destinations / ${#inferences[@]}))
grep -q "^  0-$((per_node - 1)) .* $per_node ranks .* on $inference$" "$work/layouts.txt" ||
  { cat "$work/layouts.txt"; exit 1; }
[[ $("$bin/refitctl" layouts --coordinator="$coordinator" --ranks | grep -c "^  rank .* on infer-node-") == "$destinations" ]]
# Every trainer process publishes each version and asks for the refit (the coordinator
# runs it once every source rank has published).
trainer_ranks=()
for node in "${trainers[@]}"; do
  "${ranks[@]}" --side=source --host="$node" --socket="$work/$node.sock" \
    --coordinator="$coordinator" --versions="$versions" --ack_dir="$work" \
    --ack_from="${#inferences[@]}" > "$work/trainer-ranks-$node.log" 2>&1 &
  trainer_ranks+=($!)
done
status=0
for pid in "${trainer_ranks[@]}" "${inference_ranks[@]}"; do wait "$pid" || status=$?; done
cat "$work/trainer-ranks-$trainer.log" "$work"/inference-ranks-*.log
if [[ $status -ne 0 ]]; then
  echo "synthetic ranks failed ($status)" >&2
  cat "$work"/*.log >&2
  exit 1
fi
for node in "${inferences[@]}"; do
  grep -q "^version $versions: 0 of" "$work/inference-ranks-$node.log"
done
if [[ -n $quantization ]]; then
  # The trainers' daemons quantized their views each epoch, and each epoch moved exactly the
  # bytes refitctl plan predicts for FP8 destinations (codes and scales, not BF16).
  [[ $(grep -c "quantized [0-9]* source views" "$work/$trainer.log") -ge $versions ]] ||
    { grep "quantized" "$work/$trainer.log" >&2; echo "no quantization on $trainer" >&2; exit 1; }
  # Blocks the trainers' shards cut crossed in BF16 and were quantized by the inference
  # daemon after each epoch's data plane.
  if [[ $src == fsdp=* ]]; then
    [[ $(grep -c "quantized [0-9]* received destination views" "$work/$inference.log") -ge \
      $versions ]] || { echo "no quantization on arrival on $inference" >&2; exit 1; }
  fi
  planned=$("$bin/refitctl" plan --model="$model" --src-parallel="$src" --dst-parallel="$dst" \
    --gpus-per-node="$gpus" --dst-quantization="$quantization" --json |
    grep -o '"total_bytes": [0-9]*' | grep -o '[0-9]*$')
  moved=$("$bin/refitctl" refit --coordinator="$coordinator" --version="$versions" --json |
    grep -o '"bytes": *"*[0-9]*' | head -1 | grep -o '[0-9]*$')
  [[ $planned == "$moved" ]] || { echo "moved $moved bytes, planned $planned" >&2; exit 1; }
fi
# All the daemons share this machine's /dev/shm: a reshard's chunks between them went
# through shared memory.
if [[ $strategy == reshard ]]; then
  for node in "${inferences[@]}"; do
    grep "epoch .* done: " "$work/$node.log" | tail -1 |
      grep -qE "done: [0-9]+ transfers, [0-9]+ bytes \([1-9][0-9]* through shared memory\)" ||
      { grep "epoch .* done: " "$work/$node.log" >&2; echo "no shared memory on $node" >&2; exit 1; }
  done
fi

# The coordinator's view, through refitctl: the last version is current, and asking for it
# again returns the same epoch instead of running another.
"$bin/refitctl" status --coordinator="$coordinator" | tee "$work/status.txt"
grep -q "^current version  $versions$" "$work/status.txt"
again=$("$bin/refitctl" refit --coordinator="$coordinator" --version="$versions")
grep -q "^  $(echo "$again" | head -1 | awk '{print $1}') " "$work/status.txt"
# Replicas and copies of one box were checksummed and agreed (and, for reshards, both ends
# of every piece); the slowest node is named. (FSDP trainers hold no box twice: no views.)
views='[1-9][0-9]*'
[[ $src == fsdp=* ]] && views=0
echo "$again" | grep -q "slowest node [a-z]*-node-[0-9] .* $views views and [0-9]* pieces checksummed$" ||
  { echo "$again"; exit 1; }

# Prometheus metrics: one committed epoch per version. (The synthetic ranks deregistered
# when they finished, so the group is empty again and /readyz says 503.)
http_get /metrics > "$work/metrics.txt"
grep -q "^refit_epochs_total{result=\"committed\"} $versions$" "$work/metrics.txt" ||
  { cat "$work/metrics.txt"; exit 1; }
grep -q "^refit_current_version $versions$" "$work/metrics.txt"
# The ranks' deregistrations reach the coordinator a moment after the processes exit.
for _ in $(seq 50); do
  http_get /metrics | grep "^refit_registered_ranks{role=\"destination\"} 0$" > /dev/null && break
  sleep 0.1
done
http_get /metrics | grep "^refit_registered_ranks{role=\"destination\"} 0$" > /dev/null
http_get /readyz | grep "503" > /dev/null
# Each daemon says what it found of GPUs (here: none, or a build without CUDA), on /readyz
# and through the coordinator's Status.
http_get /readyz "${daemon_metrics_port[$inference]}" | grep "^gpu: " > /dev/null
grep -q "^  $inference  \[GPU: " "$work/status.txt" || { cat "$work/status.txt"; exit 1; }
# refitctl doctor on the inference node: refitd answers, the coordinator knows the node.
"$bin/refitctl" doctor --socket="$work/$inference.sock" --coordinator="$coordinator" \
  --node="$inference" > "$work/doctor.txt" || { cat "$work/doctor.txt"; exit 1; }
grep -q "^refitd           ok    answers on the socket" "$work/doctor.txt"
grep -q "^coordinator      ok    $coordinator: version $versions, .* $inference among them" \
  "$work/doctor.txt" || { cat "$work/doctor.txt"; exit 1; }
# Each daemon counts what it exchanged with the other, by peer node.
# (grep reads all of the output: with -q it could stop early and fail the pipe.)
# series_in NAME LABEL=VALUE...: a series of NAME on stdin has every label and a value > 0.
series_in() {
  local lines
  lines=$(grep "^$1{")
  for label in "${@:2}"; do lines=$(grep -F "${label%%=*}=\"${label#*=}\"" <<< "$lines"); done
  grep " [1-9][0-9.e+]*$" <<< "$lines" > /dev/null
}
http_get /metrics "${daemon_metrics_port[$trainer]}" |
  series_in refitd_peer_bytes_total direction=sent node="$trainer" peer="$inference"
http_get /metrics "${daemon_metrics_port[$inference]}" |
  series_in refitd_peer_bytes_total direction=received node="$inference" peer="$trainer"

# Inference ranks that die without deregistering (kill -9): their daemon notices the closed
# connection and deregisters them, and the coordinator forgets them.
"${ranks[@]}" --side=destination --socket="$work/$inference.sock" \
  --first_version=$((versions + 1)) --versions=1 > "$work/doomed-ranks.log" 2>&1 &
doomed=$!
for _ in $(seq 300); do destinations_seen "$destinations" && break; sleep 0.1; done
destinations_seen "$destinations" || { cat "$work/doomed-ranks.log"; exit 1; }
kill -KILL "$doomed"
{ wait "$doomed"; } 2>/dev/null || true
for _ in $(seq 50); do destinations_seen 0 && break; sleep 0.1; done
destinations_seen 0 || { echo "killed ranks were not deregistered" >&2; exit 1; }
# The dead process could not unlink its shared-memory segments: refitd did.
for _ in $(seq 20); do
  leftover=$(ls /dev/shm | grep "^refit-$doomed-" || true)
  [[ -z $leftover ]] && break
  sleep 0.1
done
[[ -z $leftover ]] || { echo "segments of the killed ranks remain: $leftover" >&2; exit 1; }

# A refit through refitctl once the ranks have left: refused at once, naming what is missing.
if "$bin/refitctl" refit --coordinator="$coordinator" --version=$((versions + 1)) \
    --timeout-ms=300 2> "$work/refit-error.txt"; then
  echo "a refit of an unpublished version succeeded" >&2
  exit 1
fi
grep -q "the refit group is incomplete: 0 of" "$work/refit-error.txt" ||
  { cat "$work/refit-error.txt"; exit 1; }
grep -q "missing destination ranks 0, 1, 2, 3" "$work/refit-error.txt" ||
  { cat "$work/refit-error.txt"; exit 1; }

# Orderly shutdown: every process ends by itself after SIGTERM.
stop_all
echo "live refit: $versions versions of $refit ($strategy${quantization:+, $quantization}) verified byte for byte"
