#include "transport/testing/reference_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace refit::transport::testing {
namespace {

// The value of each non-negative finite E4M3 code 0x00..0x7E, from its fields.
std::vector<double> CodeValues() {
  std::vector<double> values;
  for (int code = 0; code <= 0x7E; ++code) {
    const int exponent = code >> 3, mantissa = code & 7;
    values.push_back(exponent == 0 ? mantissa / 512.0
                                   : (8 + mantissa) / 8.0 * std::pow(2.0, exponent - 7));
  }
  return values;
}

}  // namespace

float ReferenceDequantize(uint8_t code, float scale) {
  static const std::vector<double> values = CodeValues();
  const double magnitude = values[code & 0x7F];
  // The product of two floats of 4 and 24 significant bits is exact in double.
  return static_cast<float>((code & 0x80 ? -magnitude : magnitude) * static_cast<double>(scale));
}

uint8_t ReferenceE4M3(float x) {
  static const std::vector<double> values = CodeValues();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double magnitude = std::fabs(static_cast<double>(x));
  int best = 0;
  for (int code = 1; code < static_cast<int>(values.size()); ++code) {
    const double distance = std::fabs(values[code] - magnitude);
    const double best_distance = std::fabs(values[best] - magnitude);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) best = code;
  }
  return sign | static_cast<uint8_t>(best);
}

uint16_t ReferenceBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // The two BF16 values around x: x's upper half truncated, and the next one away from 0.
  const uint16_t down = static_cast<uint16_t>(bits >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  auto value = [](uint16_t half) {
    // Past the largest finite BF16 lies infinity, which IEEE rounding treats as 2^128.
    if ((half & 0x7FFF) == 0x7F80) return std::ldexp((half & 0x8000) != 0 ? -1.0 : 1.0, 128);
    const uint32_t widened = static_cast<uint32_t>(half) << 16;
    float f;
    std::memcpy(&f, &widened, sizeof(f));
    return static_cast<double>(f);
  };
  if ((bits & 0xFFFF) == 0) return down;
  const double below = std::fabs(value(down) - x), above = std::fabs(value(up) - x);
  if (below < above) return down;
  if (above < below) return up;
  return down % 2 == 0 ? down : up;
}

ReferenceBlocks ReferenceQuantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                                  int64_t block) {
  return ReferenceQuantize(x, rows, cols, block, block, "");
}

ReferenceBlocks ReferenceQuantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                                  int64_t block_height, int64_t block_width,
                                  const std::string& recipe) {
  ReferenceBlocks out;
  out.codes.assign(rows * cols, 0);
  const int64_t block_rows = (rows + block_height - 1) / block_height;
  const int64_t block_cols = (cols + block_width - 1) / block_width;
  for (int64_t br = 0; br < block_rows; ++br) {
    for (int64_t bc = 0; bc < block_cols; ++bc) {
      std::vector<int64_t> members;  // the block's element indices
      for (int64_t r = br * block_height; r < std::min(rows, (br + 1) * block_height); ++r) {
        for (int64_t c = bc * block_width; c < std::min(cols, (bc + 1) * block_width); ++c) {
          members.push_back(r * cols + c);
        }
      }
      float amax = 1e-4f;
      for (int64_t i : members) {
        if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]);
      }
      float scale = amax / 448.0f;
      if (recipe == "pow2" && std::isfinite(scale)) {  // the smallest power of two not below
        double power = 1.0;
        while (power < scale) power *= 2.0;
        while (power / 2.0 >= scale) power /= 2.0;
        scale = static_cast<float>(power);
      }
      const float multiplier = 448.0f / amax;
      for (int64_t i : members) {
        out.codes[i] = ReferenceE4M3(recipe.empty() || recipe == "deepgemm" ? x[i] * multiplier
                                                                            : x[i] / scale);
      }
      out.scales.push_back(scale);
    }
  }
  return out;
}

}  // namespace refit::transport::testing
