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

// Row `row` of the 2-D box `weights` as float32, into `out` (`cols` elements).
void WidenRow(WideType type, const ConstStridedRef& weights, int64_t row, int64_t cols,
              float* out) {
  const int64_t element_bytes = type == WideType::kF32 ? 4 : 2;
  const int64_t step = weights.strides[1];
  const uint8_t* from = weights.base + row * weights.strides[0] * element_bytes;
  int64_t i = 0;
  if (step == 1 && type == WideType::kF32) {
    std::memcpy(out, from, cols * 4);
    return;
  }
  if (step == 1) {
    // A BF16 is the upper half of its float32: interleave zeros below, eight at a time.
    for (; i + 8 <= cols; i += 8) {
      const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i * 2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm_unpacklo_epi16(_mm_setzero_si128(), halves));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 4),
                       _mm_unpackhi_epi16(_mm_setzero_si128(), halves));
    }
  }
  for (; i < cols; ++i) {
    const uint8_t* element = from + i * step * element_bytes;
    if (type == WideType::kF32) {
      std::memcpy(&out[i], element, sizeof(float));
    } else {
      uint16_t bits;
      std::memcpy(&bits, element, sizeof(bits));
      out[i] = Bf16ToFloat(bits);
    }
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

// A band of `block` rows at a time, widened one row at a time into `wide`: the block maxima
// first, then the codes (written through `narrow` when the codes' rows are strided).
void QuantizeBands(const Dims& extent, WideType type, const ConstStridedRef& weights,
                   const StridedRef& codes, const StridedRef& scales, BlockShape block) {
  const int64_t rows = extent[0], cols = extent[1];
  const int64_t block_cols = (cols + block.cols - 1) / block.cols;
  std::vector<float> wide(cols), multipliers(block_cols);
  std::vector<uint32_t> largest(block_cols);
  std::vector<uint8_t> narrow(codes.strides[1] == 1 ? 0 : cols);
  for (int64_t band = 0; band < rows; band += block.rows) {
    const int64_t band_end = std::min(rows, band + block.rows);
    std::fill(largest.begin(), largest.end(), 0);
    for (int64_t r = band; r < band_end; ++r) {
      WidenRow(type, weights, r, cols, wide.data());
      for (int64_t b = 0; b < block_cols; ++b) {
        const int64_t begin = b * block.cols, end = std::min(cols, begin + block.cols);
        largest[b] = std::max(largest[b], LargestMagnitudeBits(wide.data() + begin, end - begin));
      }
    }
    for (int64_t b = 0; b < block_cols; ++b) {
      float amax;
      std::memcpy(&amax, &largest[b], sizeof(amax));
      amax = std::max(amax, kMinBlockAmax);
      float scale = amax / kE4M3Max;
      // A block holding an infinity keeps scale +inf under every rule (its finite values
      // code to 0, its infinities to NaN); frexp of +inf would make it 1.
      if (block.rule == ScaleRule::kPowerOfTwo && std::isfinite(scale)) {
        int exponent;
        const float mantissa = std::frexp(scale, &exponent);  // scale = mantissa * 2^exponent
        scale = std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
      }
      // kDivide divides by the scale below; a power of two's inverse is exact.
      multipliers[b] = block.rule == ScaleRule::kDeepGemm     ? kE4M3Max / amax
                       : block.rule == ScaleRule::kPowerOfTwo ? 1.0f / scale
                                                              : scale;
      std::memcpy(
          scales.base + ((band / block.rows) * scales.strides[0] + b * scales.strides[1]) * 4,
          &scale, sizeof(scale));
    }
    for (int64_t r = band; r < band_end; ++r) {
      WidenRow(type, weights, r, cols, wide.data());
      for (int64_t b = 0; b < block_cols; ++b) {
        const int64_t begin = b * block.cols, end = std::min(cols, begin + block.cols);
        if (block.rule == ScaleRule::kDivide) {
          for (int64_t c = begin; c < end; ++c) wide[c] /= multipliers[b];
        } else {
          for (int64_t c = begin; c < end; ++c) wide[c] *= multipliers[b];
        }
      }
      uint8_t* row = codes.base + r * codes.strides[0];
      if (narrow.empty()) {
        FloatsToE4M3(wide.data(), row, cols);
        continue;
      }
      FloatsToE4M3(wide.data(), narrow.data(), cols);
      for (int64_t c = 0; c < cols; ++c) row[c * codes.strides[1]] = narrow[c];
    }
  }
}

}  // namespace

bool ScaleRuleOf(const std::string& recipe, ScaleRule* rule) {
  if (recipe.empty() || recipe == "deepgemm") {
    *rule = ScaleRule::kDeepGemm;
  } else if (recipe == "divide") {
    *rule = ScaleRule::kDivide;
  } else if (recipe == "pow2") {
    *rule = ScaleRule::kPowerOfTwo;
  } else {
    return false;
  }
  return true;
}

absl::Status QuantizeBlocks(const Dims& extent, WideType type, const ConstStridedRef& weights,
                            const StridedRef& codes, const StridedRef& scales, int64_t block) {
  return QuantizeBlocks(extent, type, weights, codes, scales,
                        BlockShape{block, block, ScaleRule::kDeepGemm});
}

absl::Status QuantizeBlocks(const Dims& extent, WideType type, const ConstStridedRef& weights,
                            const StridedRef& codes, const StridedRef& scales, BlockShape block) {
  if (extent.size() != 2 || weights.strides.size() != 2 || codes.strides.size() != 2 ||
      scales.strides.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block-scaled FP8 quantizes 2-D weights; this box has ", extent.size(), " dimensions"));
  }
  if (block.rows <= 0 || block.cols <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a quantization block of ", block.rows, " x ", block.cols, " elements"));
  }
  QuantizeBands(extent, type, weights, codes, scales, block);
  return absl::OkStatus();
}

absl::Status DequantizeBlocks(const Dims& extent, const Dims& corner, const ConstStridedRef& codes,
                              const ConstStridedRef& scales, WideType type,
                              const StridedRef& values, BlockShape block) {
  if (extent.size() != 2 || corner.size() != 2 || codes.strides.size() != 2 ||
      scales.strides.size() != 2 || values.strides.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block-scaled FP8 dequantizes 2-D codes; this box has ", extent.size(), " dimensions"));
  }
  if (block.rows <= 0 || block.cols <= 0 || corner[0] < 0 || corner[1] < 0 ||
      corner[0] >= block.rows || corner[1] >= block.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("a quantization block of ", block.rows, " x ", block.cols,
                     " elements with the box's corner at ", corner[0], ", ", corner[1]));
  }
  float decoded[256];
  for (int code = 0; code < 256; ++code) decoded[code] = E4M3ToFloat(static_cast<uint8_t>(code));
  const int64_t value_bytes = type == WideType::kF32 ? 4 : 2;
  for (int64_t r = 0; r < extent[0]; ++r) {
    const uint8_t* code_row = codes.base + r * codes.strides[0];
    const uint8_t* scale_row = scales.base + (corner[0] + r) / block.rows * scales.strides[0] * 4;
    uint8_t* value_row = values.base + r * values.strides[0] * value_bytes;
    for (int64_t c = 0; c < extent[1]; ++c) {
      float scale;
      std::memcpy(&scale, scale_row + (corner[1] + c) / block.cols * scales.strides[1] * 4, 4);
      const float x = decoded[code_row[c * codes.strides[1]]] * scale;
      uint8_t* to = value_row + c * values.strides[1] * value_bytes;
      if (type == WideType::kF32) {
        std::memcpy(to, &x, 4);
      } else {
        const uint16_t bits = FloatToBf16(x);
        std::memcpy(to, &bits, 2);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace refit::transport
