// How a strided box copy maps onto CUDA's copy calls, chosen from the strides so a strided
// box is one call rather than thousands: a contiguous box is one cudaMemcpyAsync, rows of a
// larger array one cudaMemcpy2DAsync, slabs one cudaMemcpy3DAsync. Boxes of more dims (or
// whose slices a 3-D call cannot describe) become a loop of 2-D or 3-D calls. Pure
// arithmetic: no CUDA here, so the planner's every stride pattern is tested on CPU against
// a byte-by-byte reference (EmulateCopyCalls) that follows CUDA's semantics.
#ifndef REFIT_TRANSPORT_GPU_COPY_SHAPE_H_
#define REFIT_TRANSPORT_GPU_COPY_SHAPE_H_

#include <cstdint>
#include <vector>

#include "transport/strided_copy.h"

namespace refit::transport::gpu {

enum class CopyCallKind { k1D, k2D, k3D };

// One CUDA copy call, in bytes, relative to the bases of the source and destination boxes.
// 1-D: width bytes. 2-D: height rows of width bytes, rows `*_pitch` apart (cudaMemcpy2D).
// 3-D: depth slices of height rows, slices `*_pitch * *_rows` apart: cudaMemcpy3D with
// cudaPitchedPtr{pitch, xsize = pitch, ysize = rows} and extent {width, height, depth}.
struct CopyCall {
  CopyCallKind kind = CopyCallKind::k1D;
  int64_t src_offset = 0, dst_offset = 0;
  int64_t width = 0;
  int64_t height = 1;
  int64_t depth = 1;
  int64_t src_pitch = 0, dst_pitch = 0;
  int64_t src_rows = 0, dst_rows = 0;  // rows per slice (3-D): slice stride = pitch * rows
};

// The calls that copy `extent` elements of `element_bytes` between the strided boxes.
std::vector<CopyCall> PlanCopyCalls(const Dims& extent, int element_bytes, const Dims& src_strides,
                                    const Dims& dst_strides);

// Performs `calls` on host memory exactly as CUDA would (the reference for tests).
void EmulateCopyCalls(const std::vector<CopyCall>& calls, const uint8_t* src, uint8_t* dst);

// cudaMemcpyKind's values, from where each side lives.
enum class MemcpyKind {
  kHostToHost = 0,
  kHostToDevice = 1,
  kDeviceToHost = 2,
  kDeviceToDevice = 3
};
MemcpyKind MemcpyKindOf(bool src_on_device, bool dst_on_device);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_COPY_SHAPE_H_
