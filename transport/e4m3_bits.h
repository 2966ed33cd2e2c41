// The E4M3 code of a float32, by its bits: one definition for the host (FloatToE4M3) and the
// CUDA quantizer (transport/gpu/block_quantize_kernel.cu), so both round alike. Nearest
// code, ties to even; beyond +-448, infinities included, +-448; NaN: 0x7F with its sign.
#ifndef REFIT_TRANSPORT_E4M3_BITS_H_
#define REFIT_TRANSPORT_E4M3_BITS_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define REFIT_HOST_DEVICE __host__ __device__
#else
#define REFIT_HOST_DEVICE
#endif

namespace refit::transport {

REFIT_HOST_DEVICE inline uint8_t E4M3FromFloatBits(uint32_t bits) {
  constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
  constexpr uint32_t kInfinityBits = 0x7F800000u;
  constexpr uint32_t kSmallestNormalBits = 0x3C800000u;  // 2^-6, E4M3's smallest normal
  constexpr uint8_t kLargestFinite = 0x7E;               // 448
  constexpr uint8_t kNaN = 0x7F;
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & kAbsMask;
  if (magnitude > kInfinityBits) return sign | kNaN;
  if (magnitude < kSmallestNormalBits) {
    // Subnormal codes 0..7 are multiples of 2^-9 (8 is the smallest normal, code 0x08):
    // scaling by 2^9 is exact, and nearbyintf rounds half to even.
#ifdef __CUDA_ARCH__
    const float value = __uint_as_float(magnitude);
#else
    float value;
    std::memcpy(&value, &magnitude, sizeof(value));
#endif
    return sign | static_cast<uint8_t>(nearbyintf(value * 512.0f));
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

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_E4M3_BITS_H_
