#!/usr/bin/env bash
# Memory benchmark: refitd's private memory (RssAnon, sampled every 20 ms) during live
# refits of dsv3-mini and of the same model with twice the layers, under one staging
# budget (per rank and batch; a daemon serving 4 ranks may stage 4 budgets per batch,
# which is the bound printed). The ranks' weights live in shared-memory segments that refitd maps (RssShmem),
# so what refitd itself adds is its private memory: it must stay within the staging budget
# plus a fixed overhead, whatever the model size.
#   refitd/bench_memory.sh BIN_DIR [BUDGET_MIB]   (SKIP_CHECKSUMS=true: without view checksums)
set -euo pipefail
bin=$(cd "$1" && pwd)
budget_mib=${2:-64}
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/tests/e2e/cluster.sh"
trainer=train-node-0
inference=infer-node-0

# rss_anon_kib PID
rss_anon_kib() {
  local key value rest
  while read -r key value rest; do
    [[ $key == RssAnon: ]] && { echo "$value"; return; }
  done < "/proc/$1/status"
  echo 0
}

# sample_peak PID FILE: writes the highest RssAnon (KiB) seen until $work/stop exists.
sample_peak() {
  local peak=0 now
  while [[ ! -e $work/stop ]] && kill -0 "$1" 2>/dev/null; do
    now=$(rss_anon_kib "$1")
    (( now > peak )) && peak=$now && echo "$peak" > "$2"
    sleep 0.02
  done
}

printf '%-24s %9s %9s  %-14s %10s %10s %10s %8s\n' model "src GB" "bound" node \
  "idle MiB" "peak MiB" "growth" "/bound"
for layers in 6 12; do
  work=$(mktemp -d /tmp/refit-mem-XXXXXX)
  pids=()
  sed "s/\"num_hidden_layers\": 6/\"num_hidden_layers\": $layers/" \
    "$here/planner/models/dsv3-mini.json" > "$work/model.json"
  cat > "$work/job.json" <<JSON
{"name": "mem", "model": "$work/model.json", "sourceParallel": "pp=2,ep=2",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 120000,
 "stagingBudgetBytes": $((budget_mib << 20)), "skipChecksums": ${SKIP_CHECKSUMS:-false}}
JSON
  start_coordinator "$work/job.json"
  start_daemons "$trainer" "$inference"
  "$bin/refit-synthetic-ranks" --side=destination --model="$work/model.json" --host="$inference" \
    --socket="$work/$inference.sock" --versions=2 --ack_dir="$work" \
    > "$work/inference-ranks.log" 2>&1 &
  pids+=($!)
  inference_ranks=$!
  for _ in $(seq 600); do destinations_seen 4 && break; sleep 0.1; done
  declare -A idle
  samplers=()
  for node in "$trainer" "$inference"; do
    idle[$node]=$(rss_anon_kib "${daemon_pid[$node]}")
    sample_peak "${daemon_pid[$node]}" "$work/peak-$node" &
    samplers+=($!)
  done
  "$bin/refit-synthetic-ranks" --side=source --model="$work/model.json" --host="$trainer" \
    --socket="$work/$trainer.sock" --coordinator="$coordinator" --versions=2 --ack_dir="$work" \
    > "$work/trainer-ranks.log" 2>&1 || { cat "$work"/*.log; exit 1; }
  wait "$inference_ranks" || { cat "$work"/*.log; exit 1; }
  touch "$work/stop"
  wait "${samplers[@]}"
  model_gb=$(grep -o "[0-9.]* MB" "$work/trainer-ranks.log" | head -1 | awk '{printf "%.2f", $1 / 1000}')
  for node in "$trainer" "$inference"; do
    peak=$(cat "$work/peak-$node" 2>/dev/null || echo "${idle[$node]}")
    awk -v model="dsv3-mini x$((layers / 6)) layers" -v gb="$model_gb" -v budget="$((4 * budget_mib))" \
      -v node="$node" -v idle="${idle[$node]}" -v peak="$peak" 'BEGIN {
        printf "%-24s %9s %6d MiB  %-14s %10.1f %10.1f %10.1f %8.2f\n", model, gb, budget, node,
          idle / 1024, peak / 1024, (peak - idle) / 1024, (peak - idle) / 1024 / budget }'
  done
  grep "epoch mem-" "$work/trainer-ranks.log" | sed 's/^/    /'
  stop_all
  rm -rf "$work"
done
