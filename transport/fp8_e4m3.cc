#include "transport/fp8_e4m3.h"

#include <cmath>
#include <cstring>

namespace refit::transport {
namespace {

uint32_t BitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

float FloatOf(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kInfinityBits = 0x7F800000u;
// 2^-6, E4M3's smallest normal: below it the codes are multiples of 2^-9.
constexpr uint32_t kSmallestNormalBits = 0x3C800000u;
constexpr uint8_t kLargestFinite = 0x7E;  // 448
constexpr uint8_t kNaN = 0x7F;

}  // namespace

uint8_t FloatToE4M3(float x) {
  const uint32_t bits = BitsOf(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & kAbsMask;
  if (magnitude > kInfinityBits) return sign | kNaN;
  if (magnitude < kSmallestNormalBits) {
    // Subnormal codes 0..7 are multiples of 2^-9 (8 is the smallest normal, code 0x08):
    // scaling by 2^9 is exact, and nearbyint rounds half to even.
    const float steps = std::nearbyint(FloatOf(magnitude) * 512.0f);
    return sign | static_cast<uint8_t>(steps);
  }
  if (magnitude >= kInfinityBits) return sign | kLargestFinite;
  // Keep 3 of float32's 23 mantissa bits, rounding half to even on the whole magnitude (a
  // carry out of the mantissa moves the exponent up, as it should); then rebias the
  // exponent from 127 to 7.
  const uint32_t kept_lsb = (magnitude >> 20) & 1u;
  const uint32_t rounded = (magnitude + 0x7FFFFu + kept_lsb) >> 20;
  const int64_t code = static_cast<int64_t>(rounded) - ((127 - 7) << 3);
  return sign | static_cast<uint8_t>(code > kLargestFinite ? kLargestFinite : code);
}

float E4M3ToFloat(uint8_t code) {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int exponent = (code >> 3) & 0x0F;
  const int mantissa = code & 0x07;
  if (exponent == 0x0F && mantissa == 0x07) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
}

float Bf16ToFloat(uint16_t bits) { return FloatOf(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBf16(float x) {
  const uint32_t bits = BitsOf(x);
  if ((bits & kAbsMask) > kInfinityBits) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  const uint32_t kept_lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + kept_lsb) >> 16);
}

}  // namespace refit::transport
