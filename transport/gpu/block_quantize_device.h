// QuantizeBlocks (transport/block_quantize.h) for weights in GPU memory: the CUDA kernel
// (block_quantize_kernel.h) on the memory's device, the codes and scales there too. Before
// a device's first quantization it checks itself once: a random BF16 weight quantized on the
// device must equal the host's quantization byte for byte, else every call on that device
// fails (FAILED_PRECONDITION), so a GPU whose arithmetic differs cannot write codes that
// differ from the host's. Builds without nvcc say UNIMPLEMENTED.
#ifndef REFIT_TRANSPORT_GPU_BLOCK_QUANTIZE_DEVICE_H_
#define REFIT_TRANSPORT_GPU_BLOCK_QUANTIZE_DEVICE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "transport/block_quantize.h"
#include "transport/strided_copy.h"

namespace refit::transport::gpu {

// Whether this build quantizes on GPUs, and device `device` agrees with the host (checked
// once per device).
absl::Status GpuQuantizerReady(int32_t device);

// `weights`, `codes` and `scales` are on device weights.device; waits for the result.
absl::Status QuantizeBlocksOnGpu(const Dims& extent, WideType type, const ConstStridedRef& weights,
                                 const StridedRef& codes, const StridedRef& scales, int64_t block);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_BLOCK_QUANTIZE_DEVICE_H_
