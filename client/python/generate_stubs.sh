#!/usr/bin/env bash
# Generates the Python gRPC stubs of proto/refit.proto into refit/_proto/ (or OUT_DIR) with
# Debian's protoc and grpc_python_plugin (python3-grpc-tools is too old for grpcio 1.51).
#   generate_stubs.sh [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto_dir=$here/../../proto
out=${1:-$here/refit/_proto}
mkdir -p "$out"
protoc -I"$proto_dir" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" "$proto_dir/refit.proto"
# The stubs import each other as top-level modules; inside the package they are relative.
sed -i 's/^import refit_pb2 as /from . import refit_pb2 as /' "$out/refit_pb2_grpc.py"
