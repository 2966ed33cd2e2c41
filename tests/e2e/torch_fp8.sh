#!/usr/bin/env bash
# The Python client with an engine that serves in FP8: two Megatron-style TP trainer
# processes hold the dense model in float32, the engine holds the decoder layers' linear
# weights as E4M3 codes in uint8 tensors with float32 block scales. Three optimizer steps, a
# refit after each; every code and scale is compared with an independent torch quantizer,
# and the epochs moved codes and scales (a quarter of the float32 bytes plus the scales).
#   torch_fp8.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work fp8
use_python_client

cat > "$work/job.json" << JSON
{"name": "fp8", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 30000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node

run_dense_example dense_fp8_inference.py
cat "$work"/dense-trainer-*.log "$work/inference.log"
for version in 1 2 3; do
  grep -q "^version $version: 56 FP8 weights and their scales equal to the reference quantizer's, 22 float32 tensors equal to the trainers'" \
    "$work/inference.log"
done
# 4 layers x 7 linear weights: 4 x (2 x 512^2 + 2 x 128 x 512 + 3 x 1536 x 512) elements,
# one byte each, their 64 x 64 blocks' scales 4 bytes each, and the float32 embeddings,
# lm_head and norms (2 x 4096 x 512 + 9 x 512, the norms to both ranks).
codes=$((4 * (2 * 512 * 512 + 2 * 128 * 512 + 3 * 1536 * 512)))
scales=$((codes / 4096 * 4))
float32=$(((2 * 4096 * 512 + 2 * 9 * 512) * 4))
grep -q "^version 3: $((codes + scales + float32)) bytes" "$work/dense-trainer-0.log" ||
  { echo "expected $((codes + scales + float32)) bytes moved" >&2; exit 1; }
grep -q "quantized [0-9]* source views" "$work/trainer-node.log"
stop_all
echo "torch fp8: three versions from two float32 TP trainers into an FP8 engine, every code and scale equal"
