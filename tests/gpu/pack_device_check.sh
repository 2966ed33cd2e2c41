#!/usr/bin/env bash
# Builds the GPU checks on a development machine (CUDA toolkit under /usr/local/cuda) and
# gathers them into one git-ignored folder, .device_check/, of at most 60 MiB: the GPU
# tests, refitd, the coordinator, the synthetic ranks, refitctl, the memcpy bound, the
# shared libraries they need (from ldd), UCX's transport modules, and the Python client with
# its MoE example. Left out: libc and
# the toolchain's runtime (the GPU machine's system is newer), the CUDA driver, and NCCL
# and the CUDA runtime, which the GPU machine's PyTorch installation carries
# (device_check.sh finds them there).
#   tests/gpu/pack_device_check.sh      then run .device_check/device_check.sh there
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/install_deps.sh
[[ -e /usr/local/cuda/include/cuda_runtime.h ]] || {
  echo "pack_device_check.sh: needs the CUDA toolkit under /usr/local/cuda" >&2
  exit 2
}
gpu_tests=(transport/gpu/gpu_support_test transport/gpu/device_copy_test
           transport/gpu/nccl_group_test transport/gpu/copy_shape_test
           transport/gpu/block_quantize_kernel_test)
programs=(refitd/refitd coordinator/refit-coordinator client/refit-synthetic-ranks client/refitctl
          transport/gpu/refit-gpu-memcpy-bench)
bazel build $(for t in "${gpu_tests[@]}" "${programs[@]}"; do echo "//${t%/*}:${t##*/}"; done)

out=.device_check
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${gpu_tests[@]}" "${programs[@]}"; do cp "bazel-bin/$t" "$out/bin/"; done
# Libraries the binaries load, minus the system's own and the GPU machine's.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libgcc_s|libstdc\+\+|libcuda\.|libcudart\.|libnccl\.)'
# (ldd on the built binaries, whose rpaths also find the tests' own Bazel libraries.)
for t in "${gpu_tests[@]}" "${programs[@]}"; do
  ldd "bazel-bin/$t" | awk '/=>/ && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$out/lib/$name"
done
# UCX loads its transports (shared memory, TCP, verbs) as modules from its own folder.
ucx_modules=$(dirname "$(ldd "$out/bin/refitd" | awk '/libucs\.so/ {print $3}')")/ucx
[[ -d $ucx_modules ]] && cp -rL "$ucx_modules" "$out/lib/ucx" && rm -f "$out"/lib/ucx/*.a
cp tests/gpu/device_check.sh tests/e2e/cluster.sh "$out/"
# The Python client and its MoE example, with stubs made here (the GPU machine has no protoc).
mkdir -p "$out/python"
cp -r client/python/refit client/python/examples "$out/python/"
rm -f "$out"/python/refit/_proto/refit_pb2*.py
client/python/generate_stubs.sh "$out/python/refit/_proto"
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* 2>/dev/null || true
size=$(du -sm "$out" | cut -f1)
echo "packed $out: ${size} MiB ($(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries)"
if (( size > 60 )); then
  echo "pack_device_check.sh: $out is over 60 MiB" >&2
  exit 1
fi
