#include <cuda_runtime.h>

#include "transport/e4m3_bits.h"
#include "transport/gpu/block_quantize_kernel.h"

namespace refit::transport::gpu {
namespace {

constexpr int kThreads = 256;

__device__ float LoadWide(const DeviceQuantizeArgs& a, int64_t row, int64_t col) {
  const int64_t element = row * a.weight_row_stride + col * a.weight_col_stride;
  if (a.bf16) {
    const uint16_t bits = static_cast<const uint16_t*>(a.weights)[element];
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  }
  return static_cast<const float*>(a.weights)[element];
}

// Quantization block (blockIdx.y, blockIdx.x): amax = the largest |x| (NaN left out, as the
// host's bits comparison does), at least 1e-4; codes E4M3(x * (448 / amax)); scale amax / 448.
// Every product and quotient is rounded to nearest, as on the host (no fused operations).
__global__ void QuantizeBlockKernel(DeviceQuantizeArgs a) {
  const int64_t block_row = blockIdx.y, block_col = blockIdx.x;
  const int64_t first_row = block_row * a.block, first_col = block_col * a.block;
  const int64_t rows = min(a.block, a.rows - first_row), cols = min(a.block, a.cols - first_col);
  const int64_t elements = rows * cols;
  __shared__ uint32_t largest[kThreads];
  uint32_t mine = 0;
  for (int64_t i = threadIdx.x; i < elements; i += blockDim.x) {
    const uint32_t magnitude =
        __float_as_uint(LoadWide(a, first_row + i / cols, first_col + i % cols)) & 0x7FFFFFFFu;
    if (magnitude <= 0x7F800000u && magnitude > mine) mine = magnitude;
  }
  largest[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && largest[threadIdx.x + half] > largest[threadIdx.x]) {
      largest[threadIdx.x] = largest[threadIdx.x + half];
    }
    __syncthreads();
  }
  const float amax = fmaxf(__uint_as_float(largest[0]), 1e-4f);
  const float multiplier = __fdiv_rn(448.0f, amax);
  if (threadIdx.x == 0) {
    a.scales[block_row * a.scale_row_stride + block_col * a.scale_col_stride] =
        __fdiv_rn(amax, 448.0f);
  }
  for (int64_t i = threadIdx.x; i < elements; i += blockDim.x) {
    const int64_t row = first_row + i / cols, col = first_col + i % cols;
    const float scaled = __fmul_rn(LoadWide(a, row, col), multiplier);
    a.codes[row * a.code_row_stride + col * a.code_col_stride] =
        E4M3FromFloatBits(__float_as_uint(scaled));
  }
}

}  // namespace

int QuantizeBlocksOnDevice(const DeviceQuantizeArgs& args) {
  if (args.rows <= 0 || args.cols <= 0) return cudaSuccess;
  if (args.block <= 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((args.cols + args.block - 1) / args.block),
                  static_cast<unsigned>((args.rows + args.block - 1) / args.block));
  QuantizeBlockKernel<<<grid, kThreads>>>(args);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  return cudaStreamSynchronize(nullptr);
}

}  // namespace refit::transport::gpu
