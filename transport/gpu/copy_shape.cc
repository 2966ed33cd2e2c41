#include "transport/gpu/copy_shape.h"

#include <cstring>

namespace refit::transport::gpu {
namespace {

// A dim of the copy after the contiguous run: how many, and the byte steps on each side.
struct Step {
  int64_t count;
  int64_t src, dst;
};

// Whether rows of `width` bytes `pitch` apart can be a 2-D copy's rows on one side.
bool RowsFit(int64_t width, int64_t pitch) { return pitch >= width && pitch > 0; }

// Whether `slice` bytes between slices is a whole number of rows of `pitch` bytes, with
// room for `height` of them (what cudaMemcpy3D's pitched pointers can say).
bool SlicesFit(int64_t pitch, int64_t height, int64_t slice) {
  return slice % pitch == 0 && slice / pitch >= height;
}

}  // namespace

std::vector<CopyCall> PlanCopyCalls(const Dims& extent, int element_bytes, const Dims& src_strides,
                                    const Dims& dst_strides) {
  std::vector<CopyCall> calls;
  for (int64_t e : extent) {
    if (e <= 0) return calls;
  }
  const Collapsed c = Collapse(extent, src_strides, dst_strides);
  const size_t inner = c.extent.size() - 1;
  // The contiguous run, and the dims outside it (outermost first).
  int64_t width = element_bytes;
  std::vector<Step> steps;
  const bool contiguous = c.src[inner] == 1 && c.dst[inner] == 1;
  for (size_t d = 0; d < c.extent.size(); ++d) {
    if (d == inner && contiguous) {
      width = c.extent[d] * element_bytes;
      continue;
    }
    steps.push_back(Step{c.extent[d], c.src[d] * element_bytes, c.dst[d] * element_bytes});
  }
  // The innermost one or two steps become the call's rows and slices when CUDA can say
  // them; the steps outside those are looped over.
  size_t in_call = 0;
  if (!steps.empty() && RowsFit(width, steps.back().src) && RowsFit(width, steps.back().dst)) {
    in_call = 1;
    if (steps.size() >= 2) {
      const Step& rows = steps.back();
      const Step& slices = steps[steps.size() - 2];
      if (SlicesFit(rows.src, rows.count, slices.src) &&
          SlicesFit(rows.dst, rows.count, slices.dst)) {
        in_call = 2;
      }
    }
  }
  const size_t looped = steps.size() - in_call;
  CopyCall shape;
  shape.width = width;
  if (in_call >= 1) {
    const Step& rows = steps.back();
    shape.kind = CopyCallKind::k2D;
    shape.height = rows.count;
    shape.src_pitch = rows.src;
    shape.dst_pitch = rows.dst;
  }
  if (in_call == 2) {
    const Step& slices = steps[steps.size() - 2];
    shape.kind = CopyCallKind::k3D;
    shape.depth = slices.count;
    shape.src_rows = slices.src / shape.src_pitch;
    shape.dst_rows = slices.dst / shape.dst_pitch;
  }
  // Odometer over the looped steps.
  std::vector<int64_t> index(looped, 0);
  while (true) {
    CopyCall call = shape;
    for (size_t s = 0; s < looped; ++s) {
      call.src_offset += index[s] * steps[s].src;
      call.dst_offset += index[s] * steps[s].dst;
    }
    calls.push_back(call);
    size_t s = looped;
    while (true) {
      if (s == 0) return calls;
      --s;
      if (++index[s] < steps[s].count) break;
      index[s] = 0;
    }
  }
}

void EmulateCopyCalls(const std::vector<CopyCall>& calls, const uint8_t* src, uint8_t* dst) {
  for (const CopyCall& call : calls) {
    const int64_t src_slice = call.src_pitch * call.src_rows;
    const int64_t dst_slice = call.dst_pitch * call.dst_rows;
    for (int64_t z = 0; z < call.depth; ++z) {
      for (int64_t y = 0; y < call.height; ++y) {
        std::memcpy(dst + call.dst_offset + z * dst_slice + y * call.dst_pitch,
                    src + call.src_offset + z * src_slice + y * call.src_pitch, call.width);
      }
    }
  }
}

MemcpyKind MemcpyKindOf(bool src_on_device, bool dst_on_device) {
  if (src_on_device) return dst_on_device ? MemcpyKind::kDeviceToDevice : MemcpyKind::kDeviceToHost;
  return dst_on_device ? MemcpyKind::kHostToDevice : MemcpyKind::kHostToHost;
}

}  // namespace refit::transport::gpu
