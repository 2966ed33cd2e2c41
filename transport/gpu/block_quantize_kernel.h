// Block-scaled FP8 on the GPU: the CUDA twin of transport/block_quantize.h's QuantizeBlocks,
// the same recipe and the same rounding (transport/e4m3_bits.h is shared), so its codes
// and scales equal the host's byte for byte. One CUDA block per quantization block: the
// block's amax by a shared-memory reduction, then its codes. Compiled by nvcc where the
// toolkit has it (HAS_NVCC); plain C++ here so that gcc-built code can call it.
#ifndef REFIT_TRANSPORT_GPU_BLOCK_QUANTIZE_KERNEL_H_
#define REFIT_TRANSPORT_GPU_BLOCK_QUANTIZE_KERNEL_H_

#include <cstdint>

namespace refit::transport::gpu {

// A 2-D box of a weight in device memory (strides in elements), its codes and its scales
// ([ceil(rows / block), ceil(cols / block)] float32), all on the current device.
struct DeviceQuantizeArgs {
  const void* weights = nullptr;
  bool bf16 = true;  // else float32
  int64_t weight_row_stride = 0, weight_col_stride = 1;
  uint8_t* codes = nullptr;
  int64_t code_row_stride = 0, code_col_stride = 1;
  float* scales = nullptr;
  int64_t scale_row_stride = 0, scale_col_stride = 1;
  int64_t rows = 0, cols = 0, block = 128;
};

// Quantizes on the current device's default stream and waits for it: the CUDA error (0:
// success).
int QuantizeBlocksOnDevice(const DeviceQuantizeArgs& args);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_BLOCK_QUANTIZE_KERNEL_H_
