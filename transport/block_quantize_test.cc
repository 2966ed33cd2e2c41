#include "transport/block_quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "transport/fp8_e4m3.h"
#include "transport/testing/reference_quantizer.h"
#include "transport/testing/strided_reference.h"

namespace refit::transport {
namespace {

// A weight whose blocks differ in scale: some all zero, some below the zero-block floor,
// some large, and values that are BF16-representable when `bf16` (so both element types
// carry the same numbers).
std::vector<float> RandomWeight(std::mt19937& rng, int64_t rows, int64_t cols, int64_t block,
                                bool bf16) {
  std::vector<float> x(rows * cols);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 5), exponent(-20, 12);
  const int64_t block_cols = (cols + block - 1) / block;
  std::vector<int> kinds, exponents;
  for (int64_t b = 0; b < ((rows + block - 1) / block) * block_cols; ++b) {
    kinds.push_back(kind(rng));
    exponents.push_back(exponent(rng));
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t b = (r / block) * block_cols + c / block;
      float value = 0.0f;
      if (kinds[b] == 1) value = unit(rng) * 1e-6f;  // below the 1e-4 floor
      if (kinds[b] >= 2) value = std::ldexp(unit(rng), exponents[b]);
      if (bf16) value = Bf16ToFloat(FloatToBf16(value));
      x[r * cols + c] = value;
    }
  }
  return x;
}

// Random shapes with edges that cut blocks, both element types, strided weights, codes and
// scales (blocks of 128 and small ones, so many blocks stay cheap): every code and scale
// is the reference's.
TEST(BlockQuantizeTest, EveryCodeAndScaleIsTheReferences) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t block = trial % 3 == 0 ? 128 : 1 + static_cast<int64_t>(rng() % 9);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % (3 * block));
    const int64_t cols = 1 + static_cast<int64_t>(rng() % (3 * block));
    const bool bf16 = trial % 2 == 1;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << rows << " x " << cols
                                      << ", block " << block << (bf16 ? ", BF16" : ", F32"));
    const std::vector<float> x = RandomWeight(rng, rows, cols, block, bf16);
    const testing::ReferenceBlocks expected = testing::ReferenceQuantize(x, rows, cols, block);

    const Dims extent{rows, cols};
    const int element_bytes = bf16 ? 2 : 4;
    // Half the trials with dense rows (the fast path), half strided in any order.
    const bool dense = trial % 4 < 2;
    const Dims weight_strides = dense ? Dims{cols, 1} : testing::RandomStrides(rng, extent);
    std::vector<uint8_t> weights(testing::Span(extent, weight_strides) * element_bytes, 0xAB);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t* at =
            weights.data() + (r * weight_strides[0] + c * weight_strides[1]) * element_bytes;
        if (bf16) {
          const uint16_t half = FloatToBf16(x[r * cols + c]);
          std::memcpy(at, &half, sizeof(half));
        } else {
          std::memcpy(at, &x[r * cols + c], sizeof(float));
        }
      }
    }
    const Dims code_strides = dense ? Dims{cols, 1} : testing::RandomStrides(rng, extent);
    std::vector<uint8_t> codes(testing::Span(extent, code_strides), 0xCD);
    const Dims scale_extent{(rows + block - 1) / block, (cols + block - 1) / block};
    const Dims scale_strides = testing::RandomStrides(rng, scale_extent);
    std::vector<uint8_t> scales(testing::Span(scale_extent, scale_strides) * 4, 0xEF);
    ASSERT_TRUE(QuantizeBlocks(extent, bf16 ? WideType::kBF16 : WideType::kF32,
                               ConstStridedRef(weights.data(), weight_strides),
                               StridedRef{codes.data(), code_strides},
                               StridedRef{scales.data(), scale_strides}, block)
                    .ok());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(codes[r * code_strides[0] + c * code_strides[1]], expected.codes[r * cols + c])
            << "element (" << r << ", " << c << ") = " << x[r * cols + c];
      }
    }
    for (int64_t br = 0; br < scale_extent[0]; ++br) {
      for (int64_t bc = 0; bc < scale_extent[1]; ++bc) {
        float scale;
        std::memcpy(&scale, scales.data() + (br * scale_strides[0] + bc * scale_strides[1]) * 4,
                    sizeof(scale));
        ASSERT_EQ(scale, expected.scales[br * scale_extent[1] + bc])
            << "block (" << br << ", " << bc << ")";
      }
    }
  }
}

// Dequantized, each element is within half a step of its code's neighbours: the codes and
// scales describe the weight, not just match the reference.
TEST(BlockQuantizeTest, CodesTimesScalesComeBackWithinE4M3sPrecision) {
  std::mt19937 rng(7);
  const int64_t rows = 300, cols = 200;
  const std::vector<float> x = RandomWeight(rng, rows, cols, 128, /*bf16=*/false);
  std::vector<uint8_t> codes(rows * cols);
  std::vector<float> scales(3 * 2);
  ASSERT_TRUE(QuantizeBlocks({rows, cols}, WideType::kF32,
                             ConstStridedRef(reinterpret_cast<const uint8_t*>(x.data()), {cols, 1}),
                             StridedRef{codes.data(), {cols, 1}},
                             StridedRef{reinterpret_cast<uint8_t*>(scales.data()), {2, 1}})
                  .ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float scale = scales[(r / 128) * 2 + c / 128];
      const float back = E4M3ToFloat(codes[r * cols + c]) * scale;
      // E4M3 keeps 3 mantissa bits: relative error at most 2^-4, absolute at most half the
      // smallest subnormal step (2^-10) times the scale.
      const float bound = std::max(std::fabs(x[r * cols + c]) / 16.0f, std::ldexp(scale, -10));
      ASSERT_LE(std::fabs(back - x[r * cols + c]), bound * 1.0001f) << r << ", " << c;
    }
  }
}

// A block holding an infinity: every recipe gives it scale +inf, its finite values code 0
// and its infinities NaN, as the reference does (pow2 once took frexp's 1.0 for +inf).
TEST(BlockQuantizeTest, ABlockHoldingAnInfinityHasAnInfiniteScaleUnderEveryRecipe) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t rows = 2, cols = 4;  // two blocks of 2 x 2: one with infinities, one finite
  const std::vector<float> x = {inf, 3.5f, 0.25f, -1.0f, -2.0f, -inf, 7.0f, 0.5f};
  for (const char* recipe : {"deepgemm", "divide", "pow2"}) {
    SCOPED_TRACE(recipe);
    BlockShape block{2, 2};
    ASSERT_TRUE(ScaleRuleOf(recipe, &block.rule));
    std::vector<uint8_t> codes(rows * cols);
    std::vector<float> scales(2);
    ASSERT_TRUE(QuantizeBlocks({rows, cols}, WideType::kF32,
                               ConstStridedRef(reinterpret_cast<const uint8_t*>(x.data()),
                                               {cols, 1}),
                               StridedRef{codes.data(), {cols, 1}},
                               StridedRef{reinterpret_cast<uint8_t*>(scales.data()), {2, 1}},
                               block)
                    .ok());
    EXPECT_EQ(scales[0], inf);
    EXPECT_TRUE(std::isfinite(scales[1])) << scales[1];
    EXPECT_EQ(codes[0] & 0x7F, 0x7F);  // infinities: NaN (the sign as the FPU gives it)
    EXPECT_EQ(codes[5] & 0x7F, 0x7F);
    EXPECT_EQ(codes[1], 0x00);  // 3.5 / inf
    EXPECT_EQ(codes[4], 0x80);  // -2 / inf: negative zero
    const testing::ReferenceBlocks expected = testing::ReferenceQuantize(x, rows, cols, 2, 2,
                                                                         recipe);
    EXPECT_EQ(codes, expected.codes);
    EXPECT_EQ(scales, expected.scales);
  }
}

TEST(BlockQuantizeTest, OnlyTwoDimensionalBoxesAndPositiveBlocks) {
  std::vector<uint8_t> memory(64);
  const ConstStridedRef in(memory.data(), {4, 2, 1});
  const StridedRef out{memory.data(), {4, 2, 1}};
  EXPECT_EQ(QuantizeBlocks({2, 2, 2}, WideType::kF32, in, out, out).code(),
            absl::StatusCode::kInvalidArgument);
  const ConstStridedRef flat(memory.data(), {2, 1});
  const StridedRef flat_out{memory.data(), {2, 1}};
  EXPECT_EQ(QuantizeBlocks({2, 2}, WideType::kF32, flat, flat_out, flat_out, 0).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit::transport
