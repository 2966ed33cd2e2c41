// Block-scaled FP8, the way DeepSeek-V3-class checkpoints are served: a 2-D weight in
// E4M3 codes plus one float32 scale per block of 128 x 128 elements (`weight_scale_inv`,
// shape [ceil(rows / 128), ceil(cols / 128)]), the block's last row and column short at the
// tensor's edges. The recipe is DeepGEMM's (per_block_cast_to_fp8), which trainers and
// engines share:
//   amax  = max |x| over the block, as float32, at least kMinBlockAmax (the zero-block rule:
//           an all-zero block gets codes 0 and scale kMinBlockAmax / 448)
//   code  = E4M3(x * (448 / amax)), the product in float32, rounded to nearest even and
//           saturated at 448 (transport/fp8_e4m3.h)
//   scale = amax / 448, in float32, so that x ~ code * scale.
#ifndef REFIT_TRANSPORT_BLOCK_QUANTIZE_H_
#define REFIT_TRANSPORT_BLOCK_QUANTIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "transport/strided_copy.h"

namespace refit::transport {

inline constexpr int64_t kQuantizationBlock = 128;
inline constexpr float kMinBlockAmax = 1e-4f;

// What the weights to quantize are held in.
enum class WideType { kF32, kBF16 };

// How a block's scale and codes follow from its amax (at least kMinBlockAmax):
//   kDeepGemm:   scale = amax / 448, code = E4M3(x * (448 / amax));
//   kDivide:     scale = amax / 448, code = E4M3(x / scale);
//   kPowerOfTwo: scale = 2^ceil(log2(amax / 448)) exactly, code = E4M3(x / scale).
// A block holding an infinity (amax = +inf) gets scale +inf under every rule: its finite
// values code to 0 and its infinities to NaN (0x7F or 0xFF), so it dequantizes to NaN
// where the weight was infinite, as torch's and DeepGEMM's casts do.
enum class ScaleRule { kDeepGemm, kDivide, kPowerOfTwo };

// A quantization block over a matrix's last two dims, rows x cols elements: 128 x 128
// (DeepSeek-V3), 1 x cols (one scale per output channel), rows x cols (one per tensor).
struct BlockShape {
  int64_t rows = kQuantizationBlock;
  int64_t cols = kQuantizationBlock;
  ScaleRule rule = ScaleRule::kDeepGemm;
};

// The rule Quantization.recipe names ("" and "deepgemm", "divide", "pow2"); false for
// another name.
bool ScaleRuleOf(const std::string& recipe, ScaleRule* rule);

// Quantizes the 2-D box `extent` ([rows, cols]) of a weight, read through `weights` (of
// `type`; strides in elements), into one E4M3 code per element written through `codes`
// (strides in elements of one byte) and one scale per block written through `scales` (a
// [ceil(rows / block), ceil(cols / block)] box of float32), blocks counted from the box's
// corner: the caller passes a box that starts at a block corner of the tensor and is cut
// short only where the tensor ends. INVALID_ARGUMENT for a box that is not 2-D or a block
// that is not positive.
absl::Status QuantizeBlocks(const Dims& extent, WideType type, const ConstStridedRef& weights,
                            const StridedRef& codes, const StridedRef& scales,
                            int64_t block = kQuantizationBlock);
// The same in blocks of `block.rows` x `block.cols` ([ceil(rows / block.rows),
// ceil(cols / block.cols)] scales), by `block.rule`.
absl::Status QuantizeBlocks(const Dims& extent, WideType type, const ConstStridedRef& weights,
                            const StridedRef& codes, const StridedRef& scales, BlockShape block);

// The reverse, as DeepSeek-V3's weight_dequant: each value of the 2-D box `extent` of codes
// (read through `codes`, 1-byte elements) is E4M3's value times its block's scale, the product
// in float32, written through `values` as `type` (BF16 rounded to nearest even, or F32).
// `scales` reads the float32 scales of the blocks the box touches, the first one at its
// origin; `corner` is where the box's first element lies within its block (the box's offset
// modulo the block), so any box may be dequantized. INVALID_ARGUMENT for a box that is not
// 2-D, a block that is not positive or a corner outside it.
absl::Status DequantizeBlocks(const Dims& extent, const Dims& corner, const ConstStridedRef& codes,
                              const ConstStridedRef& scales, WideType type,
                              const StridedRef& values, BlockShape block = {});

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_BLOCK_QUANTIZE_H_
