// Random FP8 refits run for real in one process: random 2-D and stacked 3-D tensors in BF16
// or F32, blocks of 1 to 8 rows by 2 to 8 columns, shapes whose edges cut blocks, trainers
// splitting a random dim unevenly at block edges, or anywhere (cutting blocks: quantized on
// arrival), or replicating, inference ranks splitting another (or replicating) with the scales of
// their blocks. The planner plans the sources as sent and the destinations as received, the buffer
// map quantizes the trainers' views (and the inference ranks' views received wide, after the data
// plane), the local backend moves codes, scales and wide values between real shared-memory segments
// (both strategies), and every code and scale the destinations hold is compared with the reference
// quantizer's of the global weights.
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/quantization.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"
#include "transport/buffer_map.h"
#include "transport/local_executor.h"
#include "transport/testing/backed_layouts.h"
#include "transport/testing/reference_quantizer.h"

namespace refit::transport {
namespace {

struct RandomTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool bf16 = true;
};

// The weight at a global element: hashed from (tensor, index), magnitudes over five decades
// by block row, some blocks all zero.
float WeightAt(const RandomTensor& t, int64_t linear, int64_t block_rows, int64_t version) {
  const int64_t cols = t.shape.back();
  const int64_t row = (linear / cols) % t.shape[t.shape.size() - 2];
  if ((row / block_rows + version) % 7 == 3) return 0.0f;
  uint64_t h =
      std::hash<std::string>()(t.name) ^ (static_cast<uint64_t>(linear) * 0x9E3779B97F4A7C15ull);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  const float unit = static_cast<float>(h % 2000001) / 1000000.0f - 1.0f;
  return unit * std::pow(10.0f, static_cast<float>((row / block_rows + version) % 5) - 2.0f);
}

// Cut points of [0, n) at multiples of `block` (and n), `parts` pieces or fewer.
std::vector<int64_t> Cuts(std::mt19937_64& rng, int64_t n, int64_t block, int parts) {
  std::vector<int64_t> cuts = {0};
  const int64_t blocks = (n + block - 1) / block;
  std::vector<int64_t> inner;
  for (int64_t b = 1; b < blocks; ++b) inner.push_back(b * block);
  std::shuffle(inner.begin(), inner.end(), rng);
  inner.resize(std::min<size_t>(inner.size(), parts - 1));
  std::sort(inner.begin(), inner.end());
  cuts.insert(cuts.end(), inner.begin(), inner.end());
  cuts.push_back(n);
  return cuts;
}

// A trial's quantization block: rows x cols over a matrix's last two dims, 1 over the others.
// Per channel: one scale per row of each matrix (a block of 1 x its columns).
struct TrialBlock {
  int64_t rows = 1, cols = 1;
  bool per_channel = false;
  std::string recipe;  // Quantization.recipe
  int64_t OfDim(size_t d, size_t dims) const {
    return d + 2 == dims ? rows : d + 1 == dims ? cols : 1;
  }
  // The block of a tensor of `shape`.
  TrialBlock For(const std::vector<int64_t>& shape) const {
    return per_channel ? TrialBlock{1, shape.back(), true, recipe} : *this;
  }
};

// Rectangular blocks: 1 to 8 rows (1: a scale per row's stretch of columns) by 2 to 8
// columns, or per channel (1 in 4).
TrialBlock RandomBlock(std::mt19937_64& rng) {
  TrialBlock block{int64_t{1} << std::uniform_int_distribution<int>(0, 3)(rng),
                   int64_t{1} << std::uniform_int_distribution<int>(1, 3)(rng)};
  block.per_channel = rng() % 4 == 0;
  block.recipe = std::vector<std::string>{"", "deepgemm", "divide", "pow2"}[rng() % 4];
  return block;
}

// 1 to 3 random tensors of 2 or 3 dims (stacked matrices), each dim up to 6 blocks; bf16
// or F32 at random.
std::vector<RandomTensor> RandomTensors(std::mt19937_64& rng, int64_t block) {
  std::vector<RandomTensor> tensors;
  const int count = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int i = 0; i < count; ++i) {
    RandomTensor t{absl::StrCat("t", i), {}, rng() % 2 == 0};
    if (rng() % 3 == 0) t.shape.push_back(std::uniform_int_distribution<int64_t>(1, 3)(rng));
    for (int d = 0; d < 2; ++d) {
      t.shape.push_back(std::uniform_int_distribution<int64_t>(1, 6 * block)(rng));
    }
    tensors.push_back(t);
  }
  return tensors;
}

struct RankBox {
  int rank;
  std::vector<int64_t> offset, extent;
};

// A side's boxes of a tensor of `shape` over `ranks` ranks: one random dim split at
// multiples of unit_of(dim) (fewer parts than ranks leave ranks out), or replicated.
std::vector<RankBox> RandomSplit(std::mt19937_64& rng, const std::vector<int64_t>& shape, int ranks,
                                 const std::function<int64_t(size_t)>& unit_of,
                                 std::string* description) {
  const bool replicate = rng() % 4 == 0;
  const size_t dim = std::uniform_int_distribution<size_t>(0, shape.size() - 1)(rng);
  const std::vector<int64_t> cuts = Cuts(rng, shape[dim], unit_of(dim), ranks);
  absl::StrAppend(description, " ",
                  replicate ? "replicated" : absl::StrCat("dim ", dim, " in ", cuts.size() - 1));
  std::vector<RankBox> boxes;
  for (int r = 0; r < ranks; ++r) {
    RankBox box{r, std::vector<int64_t>(shape.size(), 0), shape};
    if (!replicate) {
      if (r + 1 >= static_cast<int>(cuts.size())) continue;  // fewer parts than ranks
      box.offset[dim] = cuts[r];
      box.extent[dim] = cuts[r + 1] - cuts[r];
    }
    boxes.push_back(std::move(box));
  }
  return boxes;
}

// The box of a view's blocks.
std::pair<std::vector<int64_t>, std::vector<int64_t>> BlocksOfBox(
    const std::vector<int64_t>& offset, const std::vector<int64_t>& extent,
    const TrialBlock& block) {
  const size_t dims = offset.size();
  std::vector<int64_t> block_offset(dims), block_extent(dims);
  for (size_t d = 0; d < dims; ++d) {
    const int64_t b = block.OfDim(d, dims);
    block_offset[d] = offset[d] / b;
    block_extent[d] = (offset[d] + extent[d] + b - 1) / b - block_offset[d];
  }
  return {block_offset, block_extent};
}

TEST(QuantizedRefitRandomTest, EveryCodeAndScaleIsTheReferenceQuantizers) {
  std::mt19937_64 rng(1606);
  size_t arrived_views = 0, channels_cut = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const TrialBlock block = RandomBlock(rng);
    const std::vector<RandomTensor> tensors = RandomTensors(rng, std::max(block.rows, block.cols));
    const int source_ranks = std::uniform_int_distribution<int>(1, 4)(rng);
    const int destination_ranks = std::uniform_int_distribution<int>(1, 4)(rng);
    refit::testing::LayoutBuilder src, dst;
    std::string description =
        absl::StrCat(block.per_channel ? std::string("per channel")
                                       : absl::StrCat("block ", block.rows, " x ", block.cols),
                     " by \"", block.recipe, "\":");
    for (const RandomTensor& t : tensors) {
      const size_t dims = t.shape.size();
      const TrialBlock tensor_block = block.For(t.shape);
      src.Tensor(t.name, t.shape, t.bf16 ? "BF16" : "F32");
      dst.BlockFp8(t.name, t.shape, t.name + "_scale");
      // Each side splits one random dim at block edges (1 for leading dims), or replicates.
      bool cut_blocks = false;
      for (bool source : {true, false}) {
        const int ranks = source ? source_ranks : destination_ranks;
        const std::vector<RankBox> boxes = RandomSplit(
            rng, t.shape, ranks,
            [&](size_t dim) {
              // A trainer may cut blocks (FSDP2's even rows): those arrive wide. An inference
              // rank may cut a block spanning a whole dim (per channel) unless they do.
              if (source) cut_blocks = rng() % 3 == 0;
              const int64_t unit = tensor_block.OfDim(dim, dims);
              const bool anywhere = source ? cut_blocks : !cut_blocks && unit >= t.shape[dim];
              return anywhere ? 1 : unit;
            },
            &description);
        absl::StrAppend(&description, " (", t.name, source ? " src" : " dst",
                        source && cut_blocks ? ", anywhere)" : ")");
        for (const auto& [r, offset, extent] : boxes) {
          refit::testing::LayoutBuilder& side = source ? src : dst;
          side.Rank(r, source ? "train" : "infer", r).View(r, t.name, offset, extent);
          if (source) continue;
          channels_cut += block.per_channel && extent.back() < t.shape.back();
          const auto [block_offset, block_extent] = BlocksOfBox(offset, extent, tensor_block);
          dst.View(r, t.name + "_scale", block_offset, block_extent);
        }
      }
    }
    // BlockFp8 declares 128 x 128 blocks: this trial's block instead.
    v1::LayoutSpec destinations_spec = dst.spec();
    for (v1::TensorSpec& t : *destinations_spec.mutable_tensors()) {
      if (!t.has_quantization()) continue;
      const TrialBlock tensor_block = block.For({t.shape().begin(), t.shape().end()});
      for (int d = 0; d < t.shape_size(); ++d) {
        t.mutable_quantization()->add_block(tensor_block.OfDim(d, t.shape_size()));
      }
      t.mutable_quantization()->set_recipe(block.recipe);
      for (v1::TensorSpec& s : *destinations_spec.mutable_tensors()) {
        if (s.name() != t.quantization().scale_tensor()) continue;
        for (int d = 0; d < s.shape_size(); ++d) {
          const int64_t b = tensor_block.OfDim(d, s.shape_size());
          s.set_shape(d, (t.shape(d) + b - 1) / b);
        }
      }
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << description);
    v1::LayoutSpec sent = src.spec(), received = destinations_spec;
    std::vector<v1::QuantizedSource> quantized, on_arrival;
    const absl::Status planned = planner::SendQuantized(destinations_spec, &sent, &quantized);
    ASSERT_TRUE(planned.ok()) << planned;
    const absl::Status arriving = planner::ReceiveQuantized(&sent, &received, &on_arrival);
    ASSERT_TRUE(arriving.ok()) << arriving;
    arrived_views += on_arrival.size();
    for (const char* strategy : {planner::kStrategyReshard, planner::kStrategyGatherBroadcast}) {
      testing::BackedLayouts backed;
      const v1::LayoutSpec sources = backed.Back(src.spec(), "source");
      const v1::LayoutSpec destinations = backed.Back(destinations_spec, "destination");
      const TensorTable source_tensors = testing::TensorsOf(sources);
      const TensorTable destination_tensors = testing::TensorsOf(destinations);
      BufferMap map;
      for (const v1::RankLayout& r : sources.ranks()) {
        ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, r, &source_tensors).ok());
      }
      for (const v1::RankLayout& r : destinations.ranks()) {
        ASSERT_TRUE(map.AddRank(v1::ROLE_DESTINATION, r, &destination_tensors).ok());
      }
      // The trainers' weights, each view in its dtype, from the global values.
      for (const v1::RankLayout& r : sources.ranks()) {
        for (int v = 0; v < r.views_size(); ++v) {
          const v1::ShardView& view = r.views(v);
          const RandomTensor& t = tensors[std::stoi(view.tensor().substr(1))];
          const Dims offset(view.offset().begin(), view.offset().end());
          const Dims extent(view.extent().begin(), view.extent().end());
          auto memory =
              map.LocateForWrite(v1::ROLE_SOURCE, r.rank(), v, view.tensor(), offset, extent);
          ASSERT_TRUE(memory.ok()) << memory.status();
          int64_t elements = 1;
          for (int64_t e : extent) elements *= e;
          for (int64_t i = 0; i < elements; ++i) {
            int64_t linear = 0, local = 0, rest = i;
            Dims index(extent.size());
            for (size_t d = extent.size(); d-- > 0;) index[d] = rest % extent[d], rest /= extent[d];
            for (size_t d = 0; d < extent.size(); ++d) {
              linear = linear * t.shape[d] + offset[d] + index[d];
              local += index[d] * memory->strides[d];
            }
            const float x = WeightAt(t, linear, block.For(t.shape).rows, trial);
            if (t.bf16) {
              const uint16_t bits = testing::ReferenceBf16(x);
              std::memcpy(memory->base + local * 2, &bits, 2);
            } else {
              std::memcpy(memory->base + local * 4, &x, 4);
            }
          }
        }
      }
      ASSERT_TRUE(map.SendQuantized(quantized).ok());
      ASSERT_TRUE(map.ReceiveQuantized(on_arrival).ok());
      ASSERT_TRUE(map.QuantizeSent(2).ok());
      planner::PlanOptions options;
      options.strategy = strategy;
      const planner::Layout sent_layout = *planner::CompileLayout(sent, "source");
      const planner::Layout destination_layout = *planner::CompileLayout(received, "destination");
      auto plan =
          planner::BuildPlan(sent_layout, destination_layout, planner::DgxH100Topology(), options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<ExecutionStats> stats =
          ExecuteLocally(planner::PlanToProto(**plan, sent_layout, destination_layout), &map);
      ASSERT_TRUE(stats.ok()) << stats.status();
      ASSERT_TRUE(map.QuantizeReceived(2).ok());
      // Every destination code and scale against the reference of the global weights.
      for (const RandomTensor& t : tensors) {
        const size_t dims = t.shape.size();
        const int64_t rows = t.shape[dims - 2], cols = t.shape[dims - 1];
        const int64_t matrices = dims == 3 ? t.shape[0] : 1;
        const TrialBlock tensor_block = block.For(t.shape);
        const int64_t block_cols = (cols + tensor_block.cols - 1) / tensor_block.cols;
        const int64_t block_rows = (rows + tensor_block.rows - 1) / tensor_block.rows;
        std::vector<testing::ReferenceBlocks> expected;
        for (int64_t m = 0; m < matrices; ++m) {
          std::vector<float> x(rows * cols);
          for (int64_t i = 0; i < rows * cols; ++i) {
            float value = WeightAt(t, m * rows * cols + i, tensor_block.rows, trial);
            if (t.bf16) {
              const uint32_t bits = uint32_t{testing::ReferenceBf16(value)} << 16;
              std::memcpy(&value, &bits, 4);
            }
            x[i] = value;
          }
          expected.push_back(testing::ReferenceQuantize(x, rows, cols, tensor_block.rows,
                                                        tensor_block.cols, block.recipe));
        }
        for (const v1::RankLayout& r : destinations.ranks()) {
          for (int v = 0; v < r.views_size(); ++v) {
            const v1::ShardView& view = r.views(v);
            const bool scales = view.tensor() == t.name + "_scale";
            if (view.tensor() != t.name && !scales) continue;
            const Dims offset(view.offset().begin(), view.offset().end());
            const Dims extent(view.extent().begin(), view.extent().end());
            auto memory = map.LocateAsRegistered(v1::ROLE_DESTINATION, r.rank(), v, view.tensor(),
                                                 offset, extent);
            ASSERT_TRUE(memory.ok()) << memory.status();
            int64_t elements = 1, wrong = 0;
            for (int64_t e : extent) elements *= e;
            for (int64_t i = 0; i < elements; ++i) {
              Dims index(dims);
              int64_t local = 0;
              for (size_t d = dims, rest = i; d-- > 0;) {
                index[d] = offset[d] + static_cast<int64_t>(rest) % extent[d];
                local += (static_cast<int64_t>(rest) % extent[d]) * memory->strides[d];
                rest /= extent[d];
              }
              const int64_t m = dims == 3 ? index[0] : 0;
              const int64_t row = index[dims - 2], col = index[dims - 1];
              if (scales) {
                const float want = expected[m].scales[row * block_cols + col];
                wrong += std::memcmp(memory->base + local * 4, &want, 4) != 0;
              } else {
                wrong += memory->base[local] != expected[m].codes[row * cols + col];
              }
            }
            EXPECT_EQ(wrong, 0) << strategy << ": destination rank " << r.rank() << " view " << v
                                << " (" << view.tensor() << "), " << block_rows << " x "
                                << block_cols << " blocks";
          }
        }
      }
    }
  }
  EXPECT_GT(arrived_views, 10u);  // the trials did quantize on arrival
  EXPECT_GT(channels_cut, 2u);    // and inference ranks held parts of channels
}

// The code of a tensor's element and the scale of its block, as the trainers hold them:
// hashed, never NaN; scales over four decades.
uint8_t CodeAt(const RandomTensor& t, int64_t linear) {
  uint64_t h =
      std::hash<std::string>()(t.name) ^ (static_cast<uint64_t>(linear) * 0xD6E8FEB86659FD93ull);
  h ^= h >> 32;
  const uint8_t code = static_cast<uint8_t>(h * 0x9E3779B97F4A7C15ull >> 56);
  return (code & 0x7F) == 0x7F ? code ^ 1 : code;
}
float ScaleAt(const RandomTensor& t, int64_t block_linear) {
  const uint64_t h = (std::hash<std::string>()(t.name) + static_cast<uint64_t>(block_linear)) *
                     0x9E3779B97F4A7C15ull;
  return std::ldexp(1.0f + static_cast<float>(h >> 44) / 1048576.0f,
                    static_cast<int>((h >> 40) % 14) - 10);
}

// The reverse: trainers hold E4M3 codes split anywhere and the scales of the blocks their
// codes touch (a block cut between two trainers: both hold its scale), or replicate;
// inference ranks hold BF16 or F32 split anywhere (or replicate). The plan moves codes and
// scales; the inference ranks' buffer map dequantizes after the data plane; every value is
// the reference's dequantization (rounded to BF16 by the reference's search).
TEST(QuantizedRefitRandomTest, EveryDequantizedValueIsTheReferences) {
  std::mt19937_64 rng(612);
  size_t dequantized_views = 0;
  for (int trial = 0; trial < 30; ++trial) {
    TrialBlock block = RandomBlock(rng);
    block.per_channel = false;  // (any boxes either way)
    // bf16: the destinations' dtype.
    const std::vector<RandomTensor> tensors = RandomTensors(rng, std::max(block.rows, block.cols));
    const int source_ranks = std::uniform_int_distribution<int>(1, 4)(rng);
    const int destination_ranks = std::uniform_int_distribution<int>(1, 4)(rng);
    refit::testing::LayoutBuilder src, dst;
    std::string description = absl::StrCat("block ", block.rows, " x ", block.cols, ":");
    for (const RandomTensor& t : tensors) {
      const size_t dims = t.shape.size();
      const auto grid = BlocksOfBox(std::vector<int64_t>(dims, 0), t.shape, block).second;
      src.Tensor(t.name, t.shape, "F8_E4M3").Tensor(t.name + "_scale", grid, "F32");
      dst.Dequantized(t.name, t.shape, t.bf16 ? "BF16" : "F32", t.name + "_scale");
      for (bool source : {true, false}) {
        const int ranks = source ? source_ranks : destination_ranks;
        const std::vector<RankBox> boxes = RandomSplit(
            rng, t.shape, ranks, [](size_t) { return int64_t{1}; }, &description);
        absl::StrAppend(&description, " (", t.name, source ? " src)" : " dst)");
        for (const auto& [r, offset, extent] : boxes) {
          refit::testing::LayoutBuilder& side = source ? src : dst;
          side.Rank(r, source ? "train" : "infer", r).View(r, t.name, offset, extent);
          if (!source) continue;
          const auto [block_offset, block_extent] = BlocksOfBox(offset, extent, block);
          src.View(r, t.name + "_scale", block_offset, block_extent);
        }
      }
    }
    v1::LayoutSpec destinations_spec = dst.spec();
    for (v1::TensorSpec& t : *destinations_spec.mutable_tensors()) {
      for (int d = 0; d < t.shape_size(); ++d) {
        t.mutable_quantization()->add_block(block.OfDim(d, t.shape_size()));
      }
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << description);
    v1::LayoutSpec sent = src.spec(), received = destinations_spec;
    std::vector<v1::QuantizedSource> quantized, on_arrival;
    ASSERT_TRUE(planner::SendQuantized(destinations_spec, &sent, &quantized).ok());
    EXPECT_TRUE(quantized.empty());
    const absl::Status arriving = planner::ReceiveQuantized(&sent, &received, &on_arrival);
    ASSERT_TRUE(arriving.ok()) << arriving;
    dequantized_views += on_arrival.size();
    testing::BackedLayouts backed;
    const v1::LayoutSpec sources = backed.Back(src.spec(), "source");
    const v1::LayoutSpec destinations = backed.Back(destinations_spec, "destination");
    const TensorTable source_tensors = testing::TensorsOf(sources);
    const TensorTable destination_tensors = testing::TensorsOf(destinations);
    BufferMap map;
    for (const v1::RankLayout& r : sources.ranks()) {
      ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, r, &source_tensors).ok());
    }
    for (const v1::RankLayout& r : destinations.ranks()) {
      ASSERT_TRUE(map.AddRank(v1::ROLE_DESTINATION, r, &destination_tensors).ok());
    }
    // Visits every element of a box of `shape`: its global row-major index and its offset
    // in elements under `strides`.
    auto for_each = [](const std::vector<int64_t>& shape, const Dims& offset, const Dims& extent,
                       const Dims& strides, const std::function<void(int64_t, int64_t)>& visit) {
      int64_t elements = 1;
      for (int64_t e : extent) elements *= e;
      for (int64_t i = 0; i < elements; ++i) {
        int64_t linear = 0, local = 0, rest = i;
        Dims index(extent.size());
        for (size_t d = extent.size(); d-- > 0;) index[d] = rest % extent[d], rest /= extent[d];
        for (size_t d = 0; d < extent.size(); ++d) {
          linear = linear * shape[d] + offset[d] + index[d];
          local += index[d] * strides[d];
        }
        visit(linear, local);
      }
    };
    for (const v1::RankLayout& r : sources.ranks()) {
      for (int v = 0; v < r.views_size(); ++v) {
        const v1::ShardView& view = r.views(v);
        absl::string_view name = view.tensor();
        const bool scales = absl::ConsumeSuffix(&name, "_scale");
        const RandomTensor& t = tensors[std::stoi(std::string(name.substr(1)))];
        const Dims offset(view.offset().begin(), view.offset().end());
        const Dims extent(view.extent().begin(), view.extent().end());
        auto memory =
            map.LocateForWrite(v1::ROLE_SOURCE, r.rank(), v, view.tensor(), offset, extent);
        ASSERT_TRUE(memory.ok()) << memory.status();
        const std::vector<int64_t> shape =
            scales ? BlocksOfBox(std::vector<int64_t>(t.shape.size(), 0), t.shape, block).second
                   : t.shape;
        for_each(shape, offset, extent, memory->strides, [&](int64_t linear, int64_t local) {
          if (scales) {
            const float scale = ScaleAt(t, linear);
            std::memcpy(memory->base + local * 4, &scale, 4);
          } else {
            memory->base[local] = CodeAt(t, linear);
          }
        });
      }
    }
    ASSERT_TRUE(map.ReceiveQuantized(on_arrival).ok());
    const planner::Layout source_layout = *planner::CompileLayout(sent, "source");
    const planner::Layout destination_layout = *planner::CompileLayout(received, "destination");
    auto plan = planner::BuildPlan(source_layout, destination_layout, planner::DgxH100Topology(),
                                   planner::PlanOptions());
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<ExecutionStats> stats =
        ExecuteLocally(planner::PlanToProto(**plan, source_layout, destination_layout), &map);
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_TRUE(map.QuantizeReceived(2).ok());
    for (const v1::RankLayout& r : destinations.ranks()) {
      for (int v = 0; v < r.views_size(); ++v) {
        const v1::ShardView& view = r.views(v);
        const RandomTensor& t = tensors[std::stoi(view.tensor().substr(1))];
        const size_t dims = t.shape.size();
        const int64_t rows = t.shape[dims - 2], cols = t.shape[dims - 1];
        const int64_t block_rows = (rows + block.rows - 1) / block.rows,
                      block_cols = (cols + block.cols - 1) / block.cols;
        const Dims offset(view.offset().begin(), view.offset().end());
        const Dims extent(view.extent().begin(), view.extent().end());
        auto memory = map.LocateAsRegistered(v1::ROLE_DESTINATION, r.rank(), v, view.tensor(),
                                             offset, extent);
        ASSERT_TRUE(memory.ok()) << memory.status();
        int64_t wrong = 0;
        for_each(t.shape, offset, extent, memory->strides, [&](int64_t linear, int64_t local) {
          const int64_t matrix = linear / (rows * cols);
          const int64_t row = linear / cols % rows, col = linear % cols;
          const float scale =
              ScaleAt(t, (matrix * block_rows + row / block.rows) * block_cols + col / block.cols);
          const float want = testing::ReferenceDequantize(CodeAt(t, linear), scale);
          if (t.bf16) {
            const uint16_t bits = testing::ReferenceBf16(want);
            wrong += std::memcmp(memory->base + local * 2, &bits, 2) != 0;
          } else {
            wrong += std::memcmp(memory->base + local * 4, &want, 4) != 0;
          }
        });
        EXPECT_EQ(wrong, 0) << "destination rank " << r.rank() << " view " << v << " ("
                            << view.tensor() << ")";
      }
    }
  }
  EXPECT_GT(dequantized_views, 10u);
}

}  // namespace
}  // namespace refit::transport
