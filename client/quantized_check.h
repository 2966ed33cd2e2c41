// What a synthetic inference rank holding FP8 destinations must find after an epoch: the
// block quantization (transport/block_quantize.h) of the synthetic weights the trainers
// wrote (transport/synthetic_weights.h) for its box of codes or of block scales.
#ifndef REFIT_CLIENT_QUANTIZED_CHECK_H_
#define REFIT_CLIENT_QUANTIZED_CHECK_H_

#include <cstdint>
#include <map>
#include <string>

#include "proto/refit.pb.h"
#include "transport/strided_copy.h"

namespace refit::client {

class QuantizedCheck {
 public:
  // The quantized tensors of `destinations` and the dtypes `sources` hold them in.
  QuantizedCheck(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations);

  // Whether `tensor` is a quantized weight or the scale tensor of one.
  bool Covers(const std::string& tensor) const;
  // Bytes of the dense row-major box [offset, offset + extent) of `tensor` held at `memory`
  // that are not the codes (or scales) of `version`'s weights.
  int64_t WrongBytes(const std::string& tensor, const transport::Dims& offset,
                     const transport::Dims& extent, const uint8_t* memory, int64_t version) const;

 private:
  struct Weight {
    std::string name;
    transport::Dims shape;
    transport::Dims block;
    int source_bytes = 2;  // BF16 or F32
  };
  std::map<std::string, Weight> weights_;        // by weight name
  std::map<std::string, std::string> scale_of_;  // scale tensor -> weight
};

}  // namespace refit::client

#endif  // REFIT_CLIENT_QUANTIZED_CHECK_H_
