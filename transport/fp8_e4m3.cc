#include "transport/fp8_e4m3.h"

#include <emmintrin.h>

#include <cmath>
#include <cstring>

#include "transport/e4m3_bits.h"

namespace refit::transport {
namespace {

uint32_t BitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kInfinityBits = 0x7F800000u;
// 2^-6, E4M3's smallest normal: below it the codes are multiples of 2^-9.
constexpr uint32_t kSmallestNormalBits = 0x3C800000u;
constexpr uint8_t kLargestFinite = 0x7E;  // 448
constexpr uint8_t kNaN = 0x7F;

}  // namespace

uint8_t FloatToE4M3(float x) { return E4M3FromFloatBits(BitsOf(x)); }

void FloatsToE4M3(const float* in, uint8_t* out, int64_t count) {
  // Four lanes at a time with SSE2 (every x86-64 has it), the same steps as FloatToE4M3:
  // subnormals by adding 2^23 (which leaves x * 2^9 rounded to an integer, nearest even, in
  // the low mantissa bits), normals by rounding the float32 bits half to even at bit 20,
  // then saturation, NaN and the sign. Magnitudes compare as signed 32-bit integers: their
  // top bit is clear.
  const __m128i abs_mask = _mm_set1_epi32(0x7FFFFFFF);
  const __m128i sign_bit = _mm_set1_epi32(0x80);
  const __m128 scale = _mm_set1_ps(512.0f);
  const __m128 magic = _mm_set1_ps(8388608.0f);
  const __m128i magic_bits = _mm_castps_si128(magic);
  const __m128i half_minus_one = _mm_set1_epi32(0x7FFFF);
  const __m128i one = _mm_set1_epi32(1);
  const __m128i rebias = _mm_set1_epi32((127 - 7) << 3);
  const __m128i largest = _mm_set1_epi32(kLargestFinite);
  const __m128i nan_code = _mm_set1_epi32(kNaN);
  const __m128i smallest_normal = _mm_set1_epi32(static_cast<int32_t>(kSmallestNormalBits));
  const __m128i infinity = _mm_set1_epi32(static_cast<int32_t>(kInfinityBits));
  auto select = [](__m128i mask, __m128i yes, __m128i no) {
    return _mm_or_si128(_mm_and_si128(mask, yes), _mm_andnot_si128(mask, no));
  };
  auto four = [&](const float* from) {
    const __m128i bits = _mm_castps_si128(_mm_loadu_ps(from));
    const __m128i sign = _mm_and_si128(_mm_srli_epi32(bits, 24), sign_bit);
    const __m128i magnitude = _mm_and_si128(bits, abs_mask);
    const __m128i subnormal = _mm_sub_epi32(
        _mm_castps_si128(_mm_add_ps(_mm_mul_ps(_mm_castsi128_ps(magnitude), scale), magic)),
        magic_bits);
    const __m128i kept_lsb = _mm_and_si128(_mm_srli_epi32(magnitude, 20), one);
    const __m128i rounded =
        _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(magnitude, half_minus_one), kept_lsb), 20);
    __m128i normal = _mm_sub_epi32(rounded, rebias);
    normal = select(_mm_cmpgt_epi32(normal, largest), largest, normal);
    __m128i code = select(_mm_cmpgt_epi32(smallest_normal, magnitude), subnormal, normal);
    code = select(_mm_cmpgt_epi32(magnitude, infinity), nan_code, code);
    return _mm_or_si128(code, sign);
  };
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m128i low = _mm_packs_epi32(four(in + i), four(in + i + 4));
    const __m128i high = _mm_packs_epi32(four(in + i + 8), four(in + i + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(low, high));
  }
  for (; i < count; ++i) out[i] = FloatToE4M3(in[i]);
}

float E4M3ToFloat(uint8_t code) {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int exponent = (code >> 3) & 0x0F;
  const int mantissa = code & 0x07;
  if (exponent == 0x0F && mantissa == 0x07) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
}

uint16_t FloatToBf16(float x) {
  const uint32_t bits = BitsOf(x);
  if ((bits & kAbsMask) > kInfinityBits) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  const uint32_t kept_lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + kept_lsb) >> 16);
}

}  // namespace refit::transport
