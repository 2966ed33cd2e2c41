#include "client/quantized_check.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "planner/quantization.h"
#include "transport/block_quantize.h"
#include "transport/synthetic_weights.h"

namespace refit::client {

QuantizedCheck::QuantizedCheck(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations) {
  std::map<std::string, std::string> source_dtype;
  for (const v1::TensorSpec& t : sources.tensors()) source_dtype[t.name()] = t.dtype();
  for (const v1::TensorSpec& t : destinations.tensors()) {
    auto dtype = source_dtype.find(t.name());
    if (!t.has_quantization() || dtype == source_dtype.end() || dtype->second == t.dtype()) {
      continue;
    }
    Weight weight;
    weight.name = t.name();
    weight.shape.assign(t.shape().begin(), t.shape().end());
    weight.block = planner::BlockOf(t.quantization(), weight.shape);
    weight.source_bytes = dtype->second == "F32" ? 4 : 2;
    scale_of_[t.quantization().scale_tensor()] = t.name();
    weights_[t.name()] = weight;
  }
}

bool QuantizedCheck::Covers(const std::string& tensor) const {
  return weights_.count(tensor) > 0 || scale_of_.count(tensor) > 0;
}

int64_t QuantizedCheck::WrongBytes(const std::string& tensor, const transport::Dims& offset,
                                   const transport::Dims& extent, const uint8_t* memory,
                                   int64_t version) const {
  const bool scales = scale_of_.count(tensor) > 0;
  const Weight& weight = weights_.at(scales ? scale_of_.at(tensor) : tensor);
  const size_t dims = weight.shape.size();
  // The weight box whose blocks the view holds (codes: the view itself).
  transport::Dims weight_offset = offset, weight_extent = extent;
  if (scales) {
    for (size_t d = 0; d < dims; ++d) {
      weight_offset[d] = offset[d] * weight.block[d];
      weight_extent[d] =
          std::min(weight.shape[d], (offset[d] + extent[d]) * weight.block[d]) - weight_offset[d];
    }
  }
  int64_t elements = 1, matrices = 1;
  for (size_t d = 0; d < dims; ++d) elements *= weight_extent[d];
  for (size_t d = 0; d + 2 < dims; ++d) matrices *= weight_extent[d];
  std::vector<uint8_t> wide(elements * weight.source_bytes);
  transport::FillBox(weight.name, weight.shape, weight.source_bytes, weight_offset, weight_extent,
                     transport::StridedRef{wide.data(), transport::RowMajorStrides(weight_extent)},
                     version);
  const int64_t rows = weight_extent[dims - 2], cols = weight_extent[dims - 1];
  const transport::BlockShape block{weight.block[dims - 2], weight.block[dims - 1]};
  const int64_t block_rows = (rows + block.rows - 1) / block.rows;
  const int64_t block_cols = (cols + block.cols - 1) / block.cols;
  std::vector<uint8_t> codes(elements);
  std::vector<float> blocks(matrices * block_rows * block_cols);
  for (int64_t m = 0; m < matrices; ++m) {
    transport::QuantizeBlocks(
        {rows, cols},
        weight.source_bytes == 4 ? transport::WideType::kF32 : transport::WideType::kBF16,
        transport::ConstStridedRef(wide.data() + m * rows * cols * weight.source_bytes, {cols, 1}),
        transport::StridedRef{codes.data() + m * rows * cols, {cols, 1}},
        transport::StridedRef{
            reinterpret_cast<uint8_t*>(blocks.data() + m * block_rows * block_cols),
            {block_cols, 1}},
        block)
        .IgnoreError();  // a 2-D box and a positive block: cannot fail
  }
  const uint8_t* expected = scales ? reinterpret_cast<const uint8_t*>(blocks.data()) : codes.data();
  const int64_t bytes = scales ? static_cast<int64_t>(blocks.size()) * 4 : elements;
  int64_t wrong = 0;
  for (int64_t i = 0; i < bytes; ++i) wrong += memory[i] != expected[i];
  return wrong;
}

}  // namespace refit::client
