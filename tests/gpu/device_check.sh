#!/usr/bin/env bash
# The GPU checks, run from the folder pack_device_check.sh made, on a machine with a GPU
# and a CUDA 13 driver but neither Bazel nor Debian's packages. In under 8 minutes:
#  1. the GPU tests, among them NCCL through the real communicator with a single rank
#     (a strided piece packed on the copy engines, sent to itself, unpacked, checked);
#  2. a cross-process CUDA IPC refit of dsv3-mini on one GPU: a trainer process and an
#     inference process, each with its own allocations, one refitd between them, three
#     versions, every destination byte checked; then two more versions into FP8 inference
#     ranks, the trainers' weights quantized on the GPU, every code and scale checked;
#  3. the bandwidth table: the refit's GB/s next to plain cudaMemcpy device to device of
#     the same bytes, measured in the same run;
#  4. the Python client with CUDA tensors registered in place (each caching-allocator block
#     by its CUDA IPC handle, tensors at their offsets): the MoE example's trainer and
#     inference processes, two refits, every shard compared with torch.equal.
#     Skipped, saying why, when the machine's Python lacks grpcio;
#  5. FSDP2 trainers (3 ranks: rows that cut 128-row blocks) into FP8 inference ranks on the
#     GPU, those blocks received in BF16 and quantized on arrival on the GPU, every code and
#     scale checked.
# Writes its logs and results.txt to $OUT when set. Exit status: the number of failures.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/out}
mkdir -p "$OUT"
results=$OUT/results.txt
: > "$results"
say() { echo "$*" | tee -a "$results"; }
failures=0

# NCCL and the CUDA runtime from PyTorch's wheels (nvidia-nccl-cu13, nvidia-cuda-runtime).
libs=()
for name in libnccl.so.2 libcudart.so.13; do
  found=$(python3 - "$name" <<'PY' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    hits = glob.glob(os.path.join(root, "nvidia", "**", sys.argv[1]), recursive=True)
    hits += glob.glob(os.path.join(root, "torch", "lib", sys.argv[1]))
    if hits:
        print(os.path.dirname(hits[0]))
        break
PY
)
  [[ -n $found ]] && libs+=("$found")
  [[ -n $found ]] || say "warning: $name not found in Python's site-packages"
done
export LD_LIBRARY_PATH="$here/lib$(printf ':%s' "${libs[@]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR=$here/lib/ucx
say "device check, $(date -u +%Y-%m-%dT%H:%MZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  sed 's/^/gpu: /' | tee -a "$results"

# 1. The GPU tests.
for test in gpu_support_test device_copy_test nccl_group_test copy_shape_test \
            block_quantize_kernel_test; do
  if timeout 180 "$here/bin/$test" > "$OUT/$test.log" 2>&1; then
    say "PASS $test$(grep -q '^\[  SKIPPED \] [A-Z]' "$OUT/$test.log" && echo ' (with skipped cases)')"
  else
    say "FAIL $test (see $test.log)"
    failures=$((failures + 1))
  fi
done

# 2. Cross-process CUDA IPC refit on this GPU.
bin=$here/bin
work=$(mktemp -d /tmp/refit-gpu-XXXXXX)
pids=()
source "$here/cluster.sh"
trap 'cleanup; true' EXIT
cat > "$work/job.json" <<JSON
{"name": "gpu", "model": "dsv3-mini", "sourceParallel": "pp=2,ep=2",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 120000}
JSON
refit_ok=0
if start_coordinator "$work/job.json" && start_daemons node-0; then
  grep "gpu:" "$work/node-0.log" | head -1 | tee -a "$results"
  "$bin/refit-synthetic-ranks" --side=destination --refit=mini --gpu=0 \
    --socket="$work/node-0.sock" --versions=3 --ack_dir="$work" --timeout_ms=120000 \
    > "$OUT/inference-ranks.log" 2>&1 &
  inference=$!
  for _ in $(seq 600); do
    destinations_seen 4 || ! kill -0 "$inference" 2>/dev/null && break
    sleep 0.1
  done
  timeout 300 "$bin/refit-synthetic-ranks" --side=source --refit=mini --gpu=0 \
    --socket="$work/node-0.sock" --coordinator="$coordinator" --versions=3 --ack_dir="$work" \
    --timeout_ms=120000 > "$OUT/trainer-ranks.log" 2>&1
  wait "$inference"
  if grep -q "^version 3: 0 of" "$OUT/inference-ranks.log"; then
    refit_ok=1
    say "PASS cross-process CUDA IPC refit of dsv3-mini, 3 versions, every byte checked"
    grep "^epoch" "$OUT/trainer-ranks.log" | sed 's/^/  /' | tee -a "$results"
  fi
fi
cp "$work"/*.log "$OUT/" 2>/dev/null
if (( refit_ok == 0 )); then
  say "FAIL cross-process CUDA IPC refit (see inference-ranks.log, trainer-ranks.log, node-0.log)"
  failures=$((failures + 1))
fi

# 2b. The same into FP8 inference ranks: the trainers' daemon quantizes their GPU-held weights
# on the GPU (after its self-check against the host quantizer); the inference ranks check
# every code and scale against the host quantizer's.
if (( refit_ok == 1 )); then
  fp8_ok=0
  "$bin/refit-synthetic-ranks" --side=destination --refit=mini --gpu=0 \
    --destination_quantization=block_fp8 --socket="$work/node-0.sock" --first_version=4 \
    --versions=2 --ack_dir="$work" --timeout_ms=120000 > "$OUT/fp8-inference-ranks.log" 2>&1 &
  inference=$!
  for _ in $(seq 600); do
    destinations_seen 4 || ! kill -0 "$inference" 2>/dev/null && break
    sleep 0.1
  done
  timeout 300 "$bin/refit-synthetic-ranks" --side=source --refit=mini --gpu=0 \
    --destination_quantization=block_fp8 --socket="$work/node-0.sock" \
    --coordinator="$coordinator" --first_version=4 --versions=2 --ack_dir="$work" \
    --timeout_ms=120000 > "$OUT/fp8-trainer-ranks.log" 2>&1
  wait "$inference"
  grep -q "^version 5: 0 of" "$OUT/fp8-inference-ranks.log" && fp8_ok=1
  cp "$work/node-0.log" "$OUT/" 2>/dev/null
  if (( fp8_ok == 1 )); then
    say "PASS FP8 refit of dsv3-mini quantized on the GPU, 2 versions, every code and scale checked"
    grep "^epoch" "$OUT/fp8-trainer-ranks.log" | sed 's/^/  /' | tee -a "$results"
    grep -o "quantized [0-9]* source views .*" "$OUT/node-0.log" | tail -1 | sed 's/^/  /' |
      tee -a "$results"
  else
    say "FAIL FP8 refit quantized on the GPU (see fp8-inference-ranks.log, fp8-trainer-ranks.log, node-0.log)"
    failures=$((failures + 1))
  fi
fi

# 3. Bandwidth: the refit's best epoch next to cudaMemcpy D2D of the same bytes.
if (( refit_ok == 1 )); then
  bytes=$(grep -o "version [0-9]*, [0-9.]* MB" "$OUT/trainer-ranks.log" | head -1 |
          awk '{printf "%d", $3 * 1e6}')
  refit_gbps=$(grep -o "([0-9.]* GB/s)" "$OUT/trainer-ranks.log" | tr -d '(' |
               awk 'BEGIN {m = 0} $1 > m {m = $1} END {print m}')
  memcpy_line=$("$bin/refit-gpu-memcpy-bench" "$bytes" 0)
  memcpy_gbps=$(echo "$memcpy_line" | grep -o "[0-9.]* GB/s" | awk '{print $1}')
  say "bandwidth ($bytes bytes): refit cuda_ipc route $refit_gbps GB/s, $memcpy_line," \
      "ratio $(awk -v a="$refit_gbps" -v b="$memcpy_gbps" 'BEGIN {printf "%.2f", a / b}')" \
      "(target 0.8)"
fi
# 4. The Python client with CUDA tensors: the MoE example on cuda:0, one refitd.
if python3 -c "import grpc, torch; assert torch.cuda.is_available(), 'no CUDA in torch'" \
    2> "$OUT/python-check.log"; then
  cleanup  # step 2's processes and folder
  pids=()
  work=$(mktemp -d /tmp/refit-gpu-py-XXXXXX)
  cat > "$work/job.json" <<JSON
{"name": "torch-gpu", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 120000}
JSON
  export PYTHONPATH=$here/python:$here/python/examples
  torch_ok=0
  if start_coordinator "$work/job.json" && start_daemons node-0; then
    python3 "$here/python/examples/moe_inference.py" --socket="$work/node-0.sock" \
      --out="$work" --device=cuda:0 > "$OUT/torch-inference.log" 2>&1 &
    inference=$!
    for _ in $(seq 600); do
      destinations_seen 2 || ! kill -0 "$inference" 2>/dev/null && break
      sleep 0.1
    done
    timeout 300 python3 "$here/python/examples/moe_trainer.py" --socket="$work/node-0.sock" \
      --coordinator="$coordinator" --out="$work" --device=cuda:0 > "$OUT/torch-trainer.log" 2>&1
    wait "$inference"
    grep -q "^version 2: 22 shards equal" "$OUT/torch-inference.log" && torch_ok=1
  fi
  if (( torch_ok == 1 )); then
    say "PASS Python client, CUDA tensors in place by IPC handle: 2 refits, every shard torch.equal"
  else
    say "FAIL Python client with CUDA tensors (see torch-inference.log, torch-trainer.log)"
    failures=$((failures + 1))
  fi
else
  say "SKIP Python client with CUDA tensors: $(tail -1 "$OUT/python-check.log")"
fi

# 5. FSDP2 trainers (3 ranks: torch.chunk rows that cut 128-row blocks) into FP8 inference
# ranks on the GPU: a fresh coordinator and refitd; the tensors whose blocks the trainers cut
# arrive in BF16 into copies on the GPU and are quantized there after each data plane.
if (( refit_ok == 1 )); then
  arrival_ok=0
  cleanup  # the earlier steps' processes and folder
  pids=()
  work=$(mktemp -d /tmp/refit-gpu-fsdp-XXXXXX)
  cat > "$work/fsdp-job.json" <<JSON
{"name": "gpu-fsdp", "model": "dsv3-mini", "sourceParallel": "fsdp=3",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 120000}
JSON
  if start_coordinator "$work/fsdp-job.json" && start_daemons node-0; then
    fsdp=(--model=dsv3-mini --source_parallel=fsdp=3 --destination_parallel=tp=2,dp=2
          --destination_quantization=block_fp8 --gpu=0 --socket="$work/node-0.sock"
          --versions=2 --ack_dir="$work/fsdp" --timeout_ms=120000)
    mkdir -p "$work/fsdp"
    "$bin/refit-synthetic-ranks" --side=destination "${fsdp[@]}" \
      > "$OUT/fsdp-inference-ranks.log" 2>&1 &
    inference=$!
    for _ in $(seq 600); do
      destinations_seen 4 || ! kill -0 "$inference" 2>/dev/null && break
      sleep 0.1
    done
    timeout 300 "$bin/refit-synthetic-ranks" --side=source "${fsdp[@]}" \
      --coordinator="$coordinator" > "$OUT/fsdp-trainer-ranks.log" 2>&1
    wait "$inference"
    grep -q "^version 2: 0 of" "$OUT/fsdp-inference-ranks.log" && arrival_ok=1
  fi
  cp "$work/node-0.log" "$OUT/fsdp-node-0.log" 2>/dev/null
  if (( arrival_ok == 1 )); then
    say "PASS FP8 refit from FSDP2 trainers, cut blocks quantized on arrival on the GPU, 2 versions, every code and scale checked"
    grep -o "quantized [0-9]* received destination views .*" "$OUT/fsdp-node-0.log" | tail -1 |
      sed 's/^/  /' | tee -a "$results"
  else
    say "FAIL FP8 refit from FSDP2 trainers on the GPU (see fsdp-inference-ranks.log, fsdp-trainer-ranks.log, fsdp-node-0.log)"
    failures=$((failures + 1))
  fi
fi
say "failures: $failures"
exit "$failures"
