#!/usr/bin/env bash
# Draws the plans of the reference refits (refitctl plan --svg) into this folder.
#   planner/pictures/draw.sh    (from the repository root, after bazel build //client:refitctl)
set -euo pipefail
cd "$(dirname "$0")/../.."
refitctl=bazel-bin/client/refitctl
out=planner/pictures
for refit in mini dsv3-h100 dsv3-gb200 qwen3-235b; do
  "$refitctl" plan --refit "$refit" --svg "$out/$refit-reshard.svg" > /dev/null
done
"$refitctl" plan --refit dsv3-h100 --strategy gather_broadcast \
  --svg "$out/dsv3-h100-gather_broadcast.svg" > /dev/null
ls -la "$out"/*.svg
