#include "transport/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "transport/testing/reference_quantizer.h"

namespace refit::transport {
namespace {

float FloatOf(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// Every BF16 value (each a float32 too) and millions of random float32 bit patterns and
// values around E4M3's range: the same code as the reference's search.
TEST(Fp8E4M3Test, EveryBf16ValueAndRandomFloatsGetTheReferenceCode) {
  for (uint32_t half = 0; half <= 0xFFFF; ++half) {
    const float x = FloatOf(half << 16);
    ASSERT_EQ(FloatToE4M3(x), testing::ReferenceE4M3(x)) << "bits " << std::hex << (half << 16);
  }
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> in_range(-500.0f, 500.0f), tiny(-0.02f, 0.02f);
  for (int i = 0; i < 300000; ++i) {
    for (const float x : {FloatOf(rng()), in_range(rng), tiny(rng)}) {
      ASSERT_EQ(FloatToE4M3(x), testing::ReferenceE4M3(x)) << x;
    }
  }
}

// The vectorized array conversion gives each element the scalar one's code, for every
// BF16 value, random bit patterns (NaNs and infinities among them) and a tail of odd length.
TEST(Fp8E4M3Test, TheArrayConversionMatchesTheScalarOne) {
  std::vector<float> values;
  for (uint32_t half = 0; half <= 0xFFFF; ++half) values.push_back(FloatOf(half << 16));
  std::mt19937 rng(32);
  std::uniform_real_distribution<float> in_range(-500.0f, 500.0f);
  for (int i = 0; i < 200000; ++i) {
    values.push_back(FloatOf(rng()));
    values.push_back(in_range(rng));
  }
  values.push_back(std::numeric_limits<float>::infinity());
  values.push_back(-std::numeric_limits<float>::quiet_NaN());
  values.push_back(std::ldexp(3.0f, -10));  // 3 elements past the last full 16
  std::vector<uint8_t> codes(values.size());
  FloatsToE4M3(values.data(), codes.data(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(codes[i], FloatToE4M3(values[i])) << "element " << i << " = " << values[i];
  }
}

TEST(Fp8E4M3Test, TiesGoToTheEvenCodeAndLargeValuesSaturate) {
  EXPECT_EQ(FloatToE4M3(448.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3(464.0f), 0x7E);  // halfway to 480, which E4M3 lacks
  EXPECT_EQ(FloatToE4M3(1e9f), 0x7E);
  EXPECT_EQ(FloatToE4M3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(FloatToE4M3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(FloatToE4M3(std::nanf("")), 0x7F);
  EXPECT_EQ(FloatToE4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToE4M3(std::ldexp(1.0f, -10)), 0x00);   // between 0 and 2^-9: to 0
  EXPECT_EQ(FloatToE4M3(std::ldexp(3.0f, -10)), 0x02);   // between 1 and 2 x 2^-9: to 2
  EXPECT_EQ(FloatToE4M3(1.0625f), 0x38);                 // between 1 and 1.125: to 1
  EXPECT_EQ(FloatToE4M3(1.1875f), 0x3A);                 // between 1.125 and 1.25: 1.25
  EXPECT_EQ(FloatToE4M3(std::ldexp(15.5f, -10)), 0x08);  // the largest subnormal's tie
}

TEST(Fp8E4M3Test, EveryCodeSurvivesARoundTrip) {
  for (int code = 0; code < 256; ++code) {
    const float value = E4M3ToFloat(static_cast<uint8_t>(code));
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    EXPECT_EQ(FloatToE4M3(value), code) << code << " = " << value;
  }
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8E4M3Test, Bf16RoundsToNearestEvenLikeTheReference) {
  std::mt19937 rng(16);
  for (int i = 0; i < 1000000; ++i) {
    const float x = FloatOf(rng());
    ASSERT_EQ(FloatToBf16(x), testing::ReferenceBf16(x)) << x;
  }
  for (uint32_t half = 0; half <= 0xFFFF; ++half) {
    if ((half & 0x7F80) == 0x7F80 && (half & 0x7F) != 0) continue;  // NaN payloads
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(static_cast<uint16_t>(half))), half) << half;
  }
}

}  // namespace
}  // namespace refit::transport
