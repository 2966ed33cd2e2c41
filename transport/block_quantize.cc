#include "transport/block_quantize.h"

#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

// One row's elements [begin, end) as float32, into `out`.
void WidenRow(WideType type, const uint8_t* row, int64_t begin, int64_t end, float* out) {
  if (type == WideType::kF32) {
    std::memcpy(out, row + begin * 4, (end - begin) * 4);
    return;
  }
  // A BF16 is the upper half of its float32: interleave zeros below, eight at a time.
  const uint8_t* from = row + begin * 2;
  const int64_t count = end - begin;
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i * 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_unpacklo_epi16(_mm_setzero_si128(), halves));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 4),
                     _mm_unpackhi_epi16(_mm_setzero_si128(), halves));
  }
  for (; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, from + i * 2, sizeof(bits));
    out[i] = Bf16ToFloat(bits);
  }
}

// The largest |x| of `values`, NaN left out, as the bits of the magnitude: magnitudes order
// as their bits do, compared as signed 32-bit integers (top bit clear), four lanes at a
// time with SSE2.
uint32_t LargestMagnitudeBits(const float* values, int64_t count) {
  const __m128i abs_mask = _mm_set1_epi32(0x7FFFFFFF);
  const __m128i infinity = _mm_set1_epi32(0x7F800000);
  __m128i largest = _mm_setzero_si128();
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    __m128i magnitude = _mm_and_si128(_mm_castps_si128(_mm_loadu_ps(values + i)), abs_mask);
    magnitude = _mm_andnot_si128(_mm_cmpgt_epi32(magnitude, infinity), magnitude);  // NaN: 0
    const __m128i larger = _mm_cmpgt_epi32(magnitude, largest);
    largest = _mm_or_si128(_mm_and_si128(larger, magnitude), _mm_andnot_si128(larger, largest));
  }
  uint32_t lanes[4];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes), largest);
  uint32_t result = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  for (; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof(bits));
    bits &= 0x7FFFFFFFu;
    if (bits <= 0x7F800000u) result = std::max(result, bits);
  }
  return result;
}

// QuantizeBlocks where the weights' and the codes' rows are contiguous: a band of `block`
// rows at a time, widened one row at a time into `wide`, the block maxima first, then the
// codes.
void QuantizeContiguousRows(const Dims& extent, WideType type, const ConstStridedRef& weights,
                            const StridedRef& codes, const StridedRef& scales, int64_t block) {
  const int64_t rows = extent[0], cols = extent[1];
  const int64_t element_bytes = type == WideType::kF32 ? 4 : 2;
  const int64_t block_cols = (cols + block - 1) / block;
  std::vector<float> wide(cols), multipliers(block_cols);
  std::vector<uint32_t> largest(block_cols);
  for (int64_t band = 0; band < rows; band += block) {
    const int64_t band_end = std::min(rows, band + block);
    std::fill(largest.begin(), largest.end(), 0);
    for (int64_t r = band; r < band_end; ++r) {
      WidenRow(type, weights.base + r * weights.strides[0] * element_bytes, 0, cols, wide.data());
      for (int64_t b = 0; b < block_cols; ++b) {
        const int64_t begin = b * block, end = std::min(cols, begin + block);
        largest[b] = std::max(largest[b], LargestMagnitudeBits(wide.data() + begin, end - begin));
      }
    }
    for (int64_t b = 0; b < block_cols; ++b) {
      float amax;
      std::memcpy(&amax, &largest[b], sizeof(amax));
      amax = std::max(amax, kMinBlockAmax);
      multipliers[b] = kE4M3Max / amax;
      const float scale = amax / kE4M3Max;
      std::memcpy(scales.base + ((band / block) * scales.strides[0] + b * scales.strides[1]) * 4,
                  &scale, sizeof(scale));
    }
    for (int64_t r = band; r < band_end; ++r) {
      WidenRow(type, weights.base + r * weights.strides[0] * element_bytes, 0, cols, wide.data());
      for (int64_t b = 0; b < block_cols; ++b) {
        const int64_t begin = b * block, end = std::min(cols, begin + block);
        for (int64_t c = begin; c < end; ++c) wide[c] *= multipliers[b];
      }
      FloatsToE4M3(wide.data(), codes.base + r * codes.strides[0], cols);
    }
  }
}

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
  if (weights.strides[1] == 1 && codes.strides[1] == 1) {
    QuantizeContiguousRows(extent, type, weights, codes, scales, block);
    return absl::OkStatus();
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
