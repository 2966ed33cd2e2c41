// Test helpers: a concise builder for LayoutSpecs and a generator of random layout pairs
// (1 to 4 dims, uneven splits on up to 3 dims, replication, fused and strided buffers).
#ifndef REFIT_PLANNER_TESTING_LAYOUT_BUILDER_H_
#define REFIT_PLANNER_TESTING_LAYOUT_BUILDER_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "proto/refit.pb.h"

namespace refit::testing {

class LayoutBuilder {
 public:
  LayoutBuilder& Tensor(const std::string& name, const std::vector<int64_t>& shape,
                        const std::string& dtype = "F32");
  // A tensor held in block-scaled FP8 (Quantization "block_fp8", 128 x 128 blocks over the
  // last two dims) and its F32 scale tensor `scale_tensor`.
  LayoutBuilder& BlockFp8(const std::string& name, const std::vector<int64_t>& shape,
                          const std::string& scale_tensor);
  // A BF16 tensor cast from its F32 sources (Quantization "cast").
  LayoutBuilder& CastToBf16(const std::string& name, const std::vector<int64_t>& shape);
  // A `dtype` (BF16 or F32) tensor dequantized from its sources' E4M3 codes and their scale
  // tensor `scale_tensor` (Quantization "dequantize", 128 x 128 blocks).
  LayoutBuilder& Dequantized(const std::string& name, const std::vector<int64_t>& shape,
                             const std::string& dtype, const std::string& scale_tensor);
  // Adds (or reuses) rank `rank` on host "host-<rank / gpus_per_host>".
  LayoutBuilder& Rank(int64_t rank, const std::string& host = "", int32_t device = -1);
  LayoutBuilder& View(int64_t rank, const std::string& tensor, const std::vector<int64_t>& offset,
                      const std::vector<int64_t>& extent, const std::string& buffer = "",
                      int64_t byte_offset = 0, const std::vector<int64_t>& strides = {});
  LayoutBuilder& Buffer(int64_t rank, const std::string& name, int64_t bytes);
  // Splits `tensor` along `dim` torch.chunk-style over `ranks` (one view each).
  LayoutBuilder& Chunked(const std::string& tensor, size_t dim, const std::vector<int64_t>& ranks);
  // Every rank in `ranks` holds the whole tensor.
  LayoutBuilder& Replicated(const std::string& tensor, const std::vector<int64_t>& ranks);

  const v1::LayoutSpec& spec() const { return spec_; }

 private:
  v1::RankLayout* FindRank(int64_t rank);
  const v1::TensorSpec* FindTensor(const std::string& name) const;

  v1::LayoutSpec spec_;
};

struct RandomLayoutOptions {
  int max_tensors = 4;
  int max_ranks = 6;
  int64_t max_volume = 3000;
  bool colocated = false;  // destinations share hosts and devices with sources
  bool fused_buffers = true;
};

struct LayoutPair {
  v1::LayoutSpec sources;
  v1::LayoutSpec destinations;
  std::string description;
};

LayoutPair RandomLayoutPair(std::mt19937_64& rng, const RandomLayoutOptions& options);

// DGX H100's link ratios (NVLink 9x the NIC, local copies 30x) at a millionth of the
// speed, with latencies near zero: on the tiny layouts of the tests, bytes rather than
// latencies decide a plan's predicted time, as they do on a real model.
v1::Topology SlowLinksTopology();

// The control plane's small pair: two trainers (host "trainer") hold rows of a [16, 12]
// w and a replicated norm; two inference ranks (host "inference") hold columns of w and
// the norm.
LayoutPair RowsToColumnsPair();

}  // namespace refit::testing

#endif  // REFIT_PLANNER_TESTING_LAYOUT_BUILDER_H_
