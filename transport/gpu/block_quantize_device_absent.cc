#include "transport/gpu/block_quantize_device.h"

namespace refit::transport::gpu {
namespace {

absl::Status Absent() {
  return absl::UnimplementedError(
      "this refitd was built without nvcc: it cannot quantize weights held in GPU memory");
}

}  // namespace

absl::Status GpuQuantizerReady(int32_t) { return Absent(); }

absl::Status QuantizeBlocksOnGpu(const Dims&, WideType, const ConstStridedRef&, const StridedRef&,
                                 const StridedRef&, int64_t) {
  return Absent();
}

}  // namespace refit::transport::gpu
