#include "transport/block_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/fp8_e4m3.h"

namespace refit::transport {
namespace {

// Element (row, col) of a 2-D box as float32.
class WideReader {
 public:
  WideReader(WideType type, const ConstStridedRef& box)
      : type_(type),
        base_(box.base),
        row_stride_(box.strides[0]),
        col_stride_(box.strides[1]),
        bytes_(type == WideType::kF32 ? 4 : 2) {}
  float At(int64_t row, int64_t col) const {
    const uint8_t* element = base_ + (row * row_stride_ + col * col_stride_) * bytes_;
    if (type_ == WideType::kF32) {
      float value;
      std::memcpy(&value, element, sizeof(value));
      return value;
    }
    uint16_t bits;
    std::memcpy(&bits, element, sizeof(bits));
    return Bf16ToFloat(bits);
  }

 private:
  const WideType type_;
  const uint8_t* base_;
  const int64_t row_stride_, col_stride_;
  const int64_t bytes_;
};

}  // namespace

absl::Status QuantizeBlocks(const Dims& extent, WideType type, const ConstStridedRef& weights,
                            const StridedRef& codes, const StridedRef& scales, int64_t block) {
  if (extent.size() != 2 || weights.strides.size() != 2 || codes.strides.size() != 2 ||
      scales.strides.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block-scaled FP8 quantizes 2-D weights; this box has ", extent.size(), " dimensions"));
  }
  if (block <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("a quantization block of ", block, " elements"));
  }
  const WideReader read(type, weights);
  for (int64_t block_row = 0; block_row * block < extent[0]; ++block_row) {
    const int64_t row_begin = block_row * block;
    const int64_t row_end = std::min(extent[0], row_begin + block);
    for (int64_t block_col = 0; block_col * block < extent[1]; ++block_col) {
      const int64_t col_begin = block_col * block;
      const int64_t col_end = std::min(extent[1], col_begin + block);
      float amax = 0.0f;
      for (int64_t r = row_begin; r < row_end; ++r) {
        for (int64_t c = col_begin; c < col_end; ++c)
          amax = std::max(amax, std::fabs(read.At(r, c)));
      }
      // NaN never wins std::max against a number; a NaN weight stays NaN in its code.
      amax = std::max(amax, kMinBlockAmax);
      const float multiplier = kE4M3Max / amax;
      for (int64_t r = row_begin; r < row_end; ++r) {
        uint8_t* row = codes.base + r * codes.strides[0];
        for (int64_t c = col_begin; c < col_end; ++c) {
          row[c * codes.strides[1]] = FloatToE4M3(read.At(r, c) * multiplier);
        }
      }
      const float scale = amax / kE4M3Max;
      std::memcpy(scales.base + (block_row * scales.strides[0] + block_col * scales.strides[1]) * 4,
                  &scale, sizeof(scale));
    }
  }
  return absl::OkStatus();
}

}  // namespace refit::transport
