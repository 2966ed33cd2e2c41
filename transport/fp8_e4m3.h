// Scalar conversions between float32 and the narrow floating-point types a refit may cast
// to on the way: FP8 E4M3 (the "fn" variant: no infinities, 0x7F / 0xFF are NaN, largest
// finite 448) and BF16. Rounding is to nearest, ties to even; E4M3 saturates at +-448.
#ifndef REFIT_TRANSPORT_FP8_E4M3_H_
#define REFIT_TRANSPORT_FP8_E4M3_H_

#include <cstdint>
#include <cstring>

namespace refit::transport {

inline constexpr float kE4M3Max = 448.0f;

// The E4M3 code nearest `x` (ties to the even code); beyond +-448, infinities included,
// +-448; NaN: 0x7F with x's sign.
uint8_t FloatToE4M3(float x);
// FloatToE4M3 of each of `count` floats, without branches (the compiler vectorizes it).
void FloatsToE4M3(const float* in, uint8_t* out, int64_t count);
// The value of an E4M3 code (NaN for 0x7F and 0xFF).
float E4M3ToFloat(uint8_t code);

// BF16 is the upper half of a float32: widening is exact.
inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &widened, sizeof(x));
  return x;
}
// The BF16 nearest `x` (ties to even); NaN stays NaN (quiet).
uint16_t FloatToBf16(float x);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_FP8_E4M3_H_
