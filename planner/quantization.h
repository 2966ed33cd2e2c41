// Destination tensors held quantized (TensorSpec.quantization): the source layout as it is
// sent. Each block is quantized by a source rank that holds it whole, before the pieces
// move (or, where source ranks cut it, by the destination's daemon on arrival), so the plan
// moves codes and scales: the source side is rewritten so that a
// quantized tensor has the destination's dtype (its views are read as the codes of their
// boxes) and every source view of it gains a view of the scale tensor on its rank (the
// scales of its blocks). The planner and the data plane then move them like any tensor,
// and the network carries 1 byte per element plus the scales, not 2 (BF16) or 4 (F32).
#ifndef REFIT_PLANNER_QUANTIZATION_H_
#define REFIT_PLANNER_QUANTIZATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "planner/box.h"
#include "proto/refit.pb.h"

namespace refit::planner {

inline constexpr char kBlockFp8[] = "block_fp8";
// F32 sources rounded to BF16 destinations (nearest even): no scales, any boxes.
inline constexpr char kCast[] = "cast";
// The reverse of block_fp8: sources holding E4M3 codes and their block scales (the scale
// tensor a source tensor), destinations holding BF16 or F32 values code * scale (rounded to
// nearest even for BF16), any boxes. The codes and scales cross; each destination's daemon
// dequantizes on arrival.
inline constexpr char kDequantize[] = "dequantize";

// Whether any destination tensor declares a quantization.
bool QuantizesAny(const v1::LayoutSpec& destinations);

// The block extent of `quantization` for a tensor of `shape` (its default filled in).
Dims BlockOf(const v1::Quantization& quantization, const Dims& shape);

// Rewrites `sources` into the layout as sent and lists the views each source rank's daemon
// quantizes (QuantizedSource; a cast has no scale view: scale_view -1). Checks, with errors
// (INVALID_ARGUMENT) naming the tensor, the rank and the box: the recipe (scheme, block, dtypes,
// the scale tensor's dtype and shape); every destination view of a quantized tensor starts at a
// block corner and ends at a block edge or the tensor's end in the dims its blocks tile (a
// block spanning a whole dim, per-channel or per-tensor, may be cut), and its rank holds one view
// of the scale tensor covering its blocks. A tensor some source view of which cuts blocks (an FSDP2
// shard of 112 rows) is left in the sources' dtype, for ReceiveQuantized. A quantized tensor
// whose sources already hold the destination's dtype is left as it is (its scales come from
// the sources too). Nothing changes when no destination tensor is quantized.
absl::Status SendQuantized(const v1::LayoutSpec& destinations, v1::LayoutSpec* sources,
                           std::vector<v1::QuantizedSource>* quantized);

// After SendQuantized: the block-quantized tensors whose blocks are cut between source ranks
// are quantized on arrival. `destinations` become the layout as received: such a tensor in
// its sources' dtype (its views each a dense buffer of their own, which the destination's
// daemon keeps), the views of its scale tensor holding nothing (the plan does not fill them;
// the sources declare the scale tensor with no views); `received` lists each view (rank and
// view of the destination, scale_view the rank's view of the scales covering its blocks),
// which the destination's daemon quantizes after the data plane. The network then carries
// the sources' dtype for those tensors only. Dequantized tensors (kDequantize) likewise
// arrive as the sources hold them: the tensor in codes, and each of its views gains a view
// of the sources' scale tensor (declared by the destinations as received) for its blocks,
// scale_view in `received`. INVALID_ARGUMENT naming the rank, view and tensor for a
// bucketed destination rank (its daemon holds none of its memory), and for a destination
// view that cuts blocks the source ranks cut too (no rank holds them whole).
absl::Status ReceiveQuantized(v1::LayoutSpec* sources, v1::LayoutSpec* destinations,
                              std::vector<v1::QuantizedSource>* received);

// Makes `destinations` (a model's layout, planner/model_spec.h) hold its decoder layers'
// linear weights in block-scaled FP8, as DeepSeek-V3's FP8 checkpoint does: every tensor of
// two or more dims under "model.layers." except the router (mlp.gate.weight), 128 x 128
// blocks over the last two dims, scales in "<name>_scale_inv" (".weight" ->
// ".weight_scale_inv") held by each rank for the blocks of its views. Embeddings, lm_head,
// norms and the router stay as they are. A view that cuts blocks is left for SendQuantized
// to name.
void QuantizeLinearWeights(v1::LayoutSpec* destinations);

// `destinations` as they would be without quantization: quantized tensors in the dtype of
// their sources, scale tensors and their views gone, the retyped tensors' views each their
// own dense buffer (what the same refit would move in the sources' precision, to compare).
// Dequantized tensors are left as they are: ReceiveQuantized gives them as received.
v1::LayoutSpec WithoutQuantization(const v1::LayoutSpec& destinations,
                                   const v1::LayoutSpec& sources);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_QUANTIZATION_H_
