// The reference for block-scaled FP8 (transport/block_quantize.h), written apart from the
// data plane's code and slow on purpose: a value's code is found by comparing it with the
// value of every finite E4M3 code (in double), not by bit manipulation; a block is copied
// out, reduced and scaled on its own. Every quantizing path is checked byte for byte
// against it.
//
// The recipe (DeepGEMM's per_block_cast_to_fp8): per block, amax = max |x| in float32,
// at least 1e-4; code = the E4M3 value nearest x * (448 / amax) (float32 product; ties to
// the code with an even mantissa; above 448, 448; NaN: 0x7F with its sign); scale =
// amax / 448 in float32.
#ifndef REFIT_TRANSPORT_TESTING_REFERENCE_QUANTIZER_H_
#define REFIT_TRANSPORT_TESTING_REFERENCE_QUANTIZER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace refit::transport::testing {

// The E4M3 code of `x` by search over the code values.
uint8_t ReferenceE4M3(float x);

// BF16 by search too: the nearer of the two BF16 values around x (ties: even).
uint16_t ReferenceBf16(float x);

struct ReferenceBlocks {
  std::vector<uint8_t> codes;  // rows x cols, row-major
  std::vector<float> scales;   // ceil(rows / block) x ceil(cols / block), row-major
};

// Quantizes the dense row-major rows x cols weight `x`.
ReferenceBlocks ReferenceQuantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                                  int64_t block = 128);
// In blocks of block_rows x block_cols, by Quantization.recipe `recipe` ("" or "deepgemm":
// the above; "divide": code = E4M3(x / scale); "pow2": scale = the smallest power of two
// not below amax / 448 (the float32 quotient), code = E4M3(x / scale)).
ReferenceBlocks ReferenceQuantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                                  int64_t block_rows, int64_t block_cols,
                                  const std::string& recipe = "");

// The reverse (DeepSeek-V3's weight_dequant): the value of finite `code` (not 0x7F or 0xFF)
// from its fields, times `scale`, as float32 (the product rounded once, from double).
float ReferenceDequantize(uint8_t code, float scale);

}  // namespace refit::transport::testing

#endif  // REFIT_TRANSPORT_TESTING_REFERENCE_QUANTIZER_H_
