// A refit into block-scaled FP8 destinations, end to end in one process: a coordinator on
// loopback gRPC, a trainer daemon and an inference daemon (registry, coordinator link, UCX
// worker each), ranks in real shared memory. The trainers hold BF16 and F32 weights in row
// bands and experts; the inference ranks hold E4M3 codes and F32 block scales in column
// bands, one of them cut by the tensor's edge, and an F32 projection cast to BF16 (uneven
// rows to columns), and a weight whose trainers cut its blocks (FSDP2's 112-row shards),
// quantized by the inference daemon on arrival, and FP8 codes with their block scales that
// the inference ranks hold dequantized in BF16. Every code, scale and BF16 value the
// destinations hold after each epoch is compared with the reference quantizer's
// (transport/testing/reference_quantizer.h) of what the trainers published.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/coordinator_server.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "refitd/coordinator_link.h"
#include "refitd/testing/registration.h"
#include "tests/in_process/testing/coordinator_with_daemons.h"
#include "transport/testing/backed_layouts.h"
#include "transport/testing/reference_quantizer.h"

namespace refit::daemon {
namespace {

using transport::Dims;

// The weight value at a global coordinate of `tensor` for `version`: smooth, signed, with a
// magnitude that changes from block to block (1e-3 to 10), an all-zero block in w, and
// values past E4M3's range relative to small neighbours.
float WeightAt(const std::string& tensor, const Dims& coord, int64_t version) {
  int64_t linear = 0;
  int64_t block = 0;
  for (size_t d = 0; d < coord.size(); ++d) {
    linear = linear * 1000 + coord[d];
    block = block * 7 + (d + 2 >= coord.size() ? coord[d] / 128 : coord[d]);
  }
  if (tensor == "w" && coord[0] >= 256 && coord[1] >= 128 && coord[1] < 256) return 0.0f;
  const float magnitude = std::pow(10.0f, static_cast<float>((block + version) % 5) - 3.0f);
  return magnitude * std::sin(0.37f * static_cast<float>(linear % 100003) + version);
}

// The E4M3 code the trainers hold at a global coordinate of "codes" for `version` (never
// NaN).
uint8_t CodeAt(const Dims& coord, int64_t version) {
  const uint32_t h =
      static_cast<uint32_t>((coord[0] * 7919 + coord[1] * 104729 + version * 31) * 2654435761u) >>
      24;
  return (h & 0x7F) == 0x7F ? static_cast<uint8_t>(h ^ 1) : static_cast<uint8_t>(h);
}

struct TensorOnSide {
  std::string dtype;
  Dims shape;
};

// With the parameter true, colocated: the trainer daemon also serves the inference ranks
// (its buffer map holds w in BF16 for the one and in codes for the other), and the codes and
// scales are copied locally.
class QuantizedRefitTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    refit::testing::LayoutBuilder src, dst;
    // w [300, 260] BF16 in row bands of whole blocks; experts [4, 256, 130] F32 by expert.
    src.Tensor("w", {300, 260}, "BF16").Tensor("experts", {4, 256, 130}, "F32");
    src.Tensor("norm", {260}, "BF16").Tensor("proj", {70, 50}, "F32");
    src.Tensor("fsdp", {256, 200}, "BF16");
    src.Tensor("codes", {200, 300}, "F8_E4M3").Tensor("codes_scale_inv", {2, 3}, "F32");
    src.Rank(0, "trainer", 0).View(0, "w", {0, 0}, {256, 260}).View(0, "norm", {0}, {260});
    src.View(0, "experts", {0, 0, 0}, {2, 256, 130}).View(0, "proj", {0, 0}, {40, 50});
    src.Rank(1, "trainer", 1).View(1, "w", {256, 0}, {44, 260});
    src.View(1, "experts", {2, 0, 0}, {2, 256, 130}).View(1, "proj", {40, 0}, {30, 50});
    // FSDP2-like rows: the first block row is cut between the trainers.
    src.View(0, "fsdp", {0, 0}, {112, 200}).View(1, "fsdp", {112, 0}, {144, 200});
    // FP8 codes in rows that cut a block row (both trainers hold its scales).
    src.View(0, "codes", {0, 0}, {90, 300}).View(0, "codes_scale_inv", {0, 0}, {1, 3});
    src.View(1, "codes", {90, 0}, {110, 300}).View(1, "codes_scale_inv", {0, 0}, {2, 3});
    // Inference: column bands of w (the second 4 wide, cut by the tensor's edge), experts
    // split inside each expert by rows, each rank with the scales of its blocks.
    dst.BlockFp8("w", {300, 260}, "w_scale_inv")
        .BlockFp8("experts", {4, 256, 130}, "experts_scale");
    dst.Tensor("norm", {260}, "BF16").CastToBf16("proj", {70, 50});
    dst.BlockFp8("fsdp", {256, 200}, "fsdp_scale_inv");
    dst.Dequantized("codes", {200, 300}, "BF16", "codes_scale_inv");
    dst.Rank(0, "inference", 0).View(0, "w", {0, 0}, {300, 256});
    dst.View(0, "w_scale_inv", {0, 0}, {3, 2}).View(0, "norm", {0}, {260});
    dst.View(0, "proj", {0, 0}, {70, 30});
    dst.View(0, "experts", {0, 0, 0}, {4, 128, 130}).View(0, "experts_scale", {0, 0, 0}, {4, 1, 2});
    dst.Rank(1, "inference", 1).View(1, "w", {0, 256}, {300, 4});
    dst.View(1, "w_scale_inv", {0, 2}, {3, 1}).View(1, "norm", {0}, {260});
    dst.View(1, "proj", {0, 30}, {70, 20});
    dst.View(1, "experts", {0, 128, 0}, {4, 128, 130})
        .View(1, "experts_scale", {0, 1, 0}, {4, 1, 2});
    for (int r = 0; r < 2; ++r) {  // column halves, quantized on arrival
      dst.View(r, "fsdp_scale_inv", {0, r}, {2, 1})
          .View(r, "fsdp", {0, 128 * r}, {256, 128 - 56 * r});
      dst.View(r, "codes", {0, 150 * r}, {200, 150});  // columns that cut a block
    }
    for (const v1::TensorSpec& t : src.spec().tensors()) {
      source_tensors_[t.name()] = {t.dtype(), Dims(t.shape().begin(), t.shape().end())};
    }

    v1::JobSpec job;
    job.set_name("fp8");
    job.set_source_ranks(2);
    job.set_destination_ranks(2);
    job.set_staging_budget_bytes(64 << 10);  // several batches
    ASSERT_TRUE(cluster_.Start(job).ok());
    sources_ = backed_.Back(src.spec(), "source");
    destinations_ = backed_.Back(dst.spec(), "destination");
    cluster_.Link(&trainer_, "trainer", &trainer_metrics_);
    cluster_.Link(&inference_, "inference");
    for (const v1::RankLayout& r : sources_.ranks())
      Register(&trainer_, v1::ROLE_SOURCE, r, sources_);
    for (const v1::RankLayout& r : destinations_.ranks()) {
      Register(&InferenceRegistry(), v1::ROLE_DESTINATION, r, destinations_);
    }
    ASSERT_TRUE(cluster_.GroupSeen(2, 2));
  }

  void TearDown() override { cluster_.Stop(); }

  void Register(RankRegistry* registry, v1::Role role, const v1::RankLayout& rank,
                const v1::LayoutSpec& spec) {
    ASSERT_TRUE(registry->Register(testing::RegistrationOf(role, rank, spec)).ok());
  }

  // Writes `version`'s weights into every source view, in the view's dtype, and publishes.
  void Publish(int64_t version) {
    for (const v1::RankLayout& r : sources_.ranks()) {
      {
        RankRegistry::BufferHold hold = trainer_.HoldBuffers();
        for (int v = 0; v < r.views_size(); ++v) {
          const v1::ShardView& view = r.views(v);
          const Dims offset(view.offset().begin(), view.offset().end());
          const Dims extent(view.extent().begin(), view.extent().end());
          absl::StatusOr<transport::StridedRef> memory = hold.mutable_buffers().LocateForWrite(
              v1::ROLE_SOURCE, r.rank(), v, view.tensor(), offset, extent);
          ASSERT_TRUE(memory.ok()) << memory.status();
          const std::string& dtype = source_tensors_.at(view.tensor()).dtype;
          const bool bf16 = dtype == "BF16";
          ForEachCoordinate(
              offset, extent,
              [&](const Dims& coord, int64_t element) {
                const float x = WeightAt(view.tensor(), coord, version);
                if (dtype == "F8_E4M3") {
                  memory->base[element] = CodeAt(coord, version);
                } else if (bf16) {
                  const uint16_t bits = transport::testing::ReferenceBf16(x);
                  std::memcpy(memory->base + element * 2, &bits, 2);
                } else {
                  std::memcpy(memory->base + element * 4, &x, 4);
                }
              },
              memory->strides);
        }
      }
      ASSERT_TRUE(trainer_.Publish(r.rank(), version).ok());
    }
  }

  // Calls `visit(coordinate, element)` for every element of the box, `element` the offset
  // in elements under `strides`.
  static void ForEachCoordinate(const Dims& offset, const Dims& extent,
                                const std::function<void(const Dims&, int64_t)>& visit,
                                const Dims& strides) {
    int64_t count = 1;
    for (int64_t e : extent) count *= e;
    Dims index(extent.size(), 0);
    for (int64_t i = 0; i < count; ++i) {
      Dims coord(offset);
      int64_t element = 0;
      for (size_t d = 0; d < extent.size(); ++d) {
        coord[d] += index[d];
        element += index[d] * strides[d];
      }
      visit(coord, element);
      for (size_t d = extent.size(); d-- > 0;) {
        if (++index[d] < extent[d]) break;
        index[d] = 0;
      }
    }
  }

  // The reference codes and scales of matrix `matrix` (leading index; 0 for 2-D) of
  // `tensor` at `version`, from the values as the trainers hold them.
  transport::testing::ReferenceBlocks Reference(const std::string& tensor, int64_t matrix,
                                                int64_t version) {
    const TensorOnSide& t = source_tensors_.at(tensor);
    const int64_t rows = t.shape[t.shape.size() - 2], cols = t.shape.back();
    std::vector<float> x(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        Dims coord = t.shape.size() == 3 ? Dims{matrix, r, c} : Dims{r, c};
        float value = WeightAt(tensor, coord, version);
        if (t.dtype == "BF16") {
          const uint32_t bits = uint32_t{transport::testing::ReferenceBf16(value)} << 16;
          std::memcpy(&value, &bits, 4);
        }
        x[r * cols + c] = value;
      }
    }
    return transport::testing::ReferenceQuantize(x, rows, cols);
  }

  // Values of BF16 destination view `v` whose bits are not `want(coordinate)`.
  int64_t WrongBf16(const transport::BufferMap& buffers, int64_t rank, int v,
                    const v1::ShardView& view, const std::function<float(const Dims&)>& want) {
    const Dims offset(view.offset().begin(), view.offset().end());
    const Dims extent(view.extent().begin(), view.extent().end());
    absl::StatusOr<transport::ConstStridedRef> memory =
        buffers.LocateAsRegistered(v1::ROLE_DESTINATION, rank, v, view.tensor(), offset, extent);
    EXPECT_TRUE(memory.ok()) << memory.status();
    if (!memory.ok()) return -1;
    int64_t wrong = 0;
    ForEachCoordinate(
        offset, extent,
        [&](const Dims& coord, int64_t element) {
          const uint16_t bits = transport::testing::ReferenceBf16(want(coord));
          wrong += std::memcmp(memory->base + element * 2, &bits, 2) != 0;
        },
        memory->strides);
    return wrong;
  }

  // Codes and scales of every destination view that differ from the reference's.
  int64_t WrongQuantizedElements(int64_t version) {
    std::map<std::pair<std::string, int64_t>, transport::testing::ReferenceBlocks> reference;
    auto reference_of = [&](const std::string& tensor,
                            int64_t matrix) -> const transport::testing::ReferenceBlocks& {
      auto key = std::make_pair(tensor, matrix);
      auto it = reference.find(key);
      if (it == reference.end())
        it = reference.emplace(key, Reference(tensor, matrix, version)).first;
      return it->second;
    };
    int64_t wrong = 0;
    RankRegistry::BufferHold hold = InferenceRegistry().HoldBuffers();
    for (const v1::RankLayout& r : destinations_.ranks()) {
      for (int v = 0; v < r.views_size(); ++v) {
        const v1::ShardView& view = r.views(v);
        absl::string_view name = view.tensor();
        const bool scales =
            absl::ConsumeSuffix(&name, "_scale_inv") || absl::ConsumeSuffix(&name, "_scale");
        const std::string weight(name);
        if (weight == "norm") continue;
        if (weight == "proj") {  // cast from F32: each value rounded to BF16
          wrong += WrongBf16(hold.buffers(), r.rank(), v, view,
                             [&](const Dims& coord) { return WeightAt("proj", coord, version); });
          continue;
        }
        if (weight == "codes") {  // dequantized from the trainers' codes and block scales
          wrong += WrongBf16(hold.buffers(), r.rank(), v, view, [&](const Dims& coord) {
            const float scale =
                WeightAt("codes_scale_inv", {coord[0] / 128, coord[1] / 128}, version);
            return transport::testing::ReferenceDequantize(CodeAt(coord, version), scale);
          });
          continue;
        }
        const Dims offset(view.offset().begin(), view.offset().end());
        const Dims extent(view.extent().begin(), view.extent().end());
        absl::StatusOr<transport::ConstStridedRef> memory = hold.buffers().LocateAsRegistered(
            v1::ROLE_DESTINATION, r.rank(), v, view.tensor(), offset, extent);
        EXPECT_TRUE(memory.ok()) << memory.status();
        if (!memory.ok()) return -1;
        const int64_t cols = source_tensors_.at(weight).shape.back();
        const int64_t block_cols = (cols + 127) / 128;
        ForEachCoordinate(
            offset, extent,
            [&](const Dims& coord, int64_t element) {
              const int64_t matrix = coord.size() == 3 ? coord[0] : 0;
              const int64_t row = coord[coord.size() - 2], col = coord.back();
              const transport::testing::ReferenceBlocks& expected = reference_of(weight, matrix);
              if (scales) {
                float held;
                std::memcpy(&held, memory->base + element * 4, 4);
                const float want = expected.scales[row * block_cols + col];
                if (std::memcmp(&held, &want, 4) != 0) ++wrong;
              } else if (memory->base[element] != expected.codes[row * cols + col]) {
                ++wrong;
              }
            },
            memory->strides);
      }
    }
    return wrong;
  }

  DaemonMetrics trainer_metrics_{std::make_shared<prometheus::Registry>(), "trainer"};
  std::map<std::string, TensorOnSide> source_tensors_;
  transport::testing::BackedLayouts backed_;
  v1::LayoutSpec sources_, destinations_;
  RankRegistry& InferenceRegistry() { return GetParam() ? trainer_ : inference_; }

  RankRegistry trainer_{"trainer"}, inference_{"inference"};
  // Declared after the registries: its links go first.
  testing::CoordinatorWithDaemons cluster_;
};

TEST_P(QuantizedRefitTest, EveryCodeAndScaleIsTheReferenceQuantizersEpochAfterEpoch) {
  // The trainer daemon holds the codes and scales of its four quantized views before the
  // first epoch (the plan is sent ahead once the group is complete), and no epoch allocates.
  const prometheus::Labels quantized{{"kind", "quantized_sources"}};
  auto held = [&]() { return trainer_metrics_.kept_memory_bytes.Add(quantized).Value(); };
  auto allocations = [&]() {
    return trainer_metrics_.kept_memory_allocations.Add(quantized).Value();
  };
  for (int i = 0; i < 250 && held() == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(held(), 300 * 260 + 3 * 3 * 4 + 4 * 256 * 130 + 4 * 2 * 2 * 4 + 70 * 50 * 2);
  EXPECT_EQ(allocations(), 6);
  for (int64_t version : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("version ", version));
    ASSERT_NO_FATAL_FAILURE(Publish(version));
    v1::RefitReport report;
    const grpc::Status refit = cluster_.Refit(version, &report, /*deadline_ms=*/20000);
    ASSERT_TRUE(refit.ok()) << refit.error_message();
    // Codes (1 byte per element) and scales crossed, not BF16 or F32: every w element once
    // as a code, every experts element once, the scales, and the BF16 norm to both ranks;
    // fsdp once in BF16 (quantized on arrival: none of its scales cross); the FP8 codes once
    // and each inference rank the scales of the 2 x 2 blocks its columns touch.
    EXPECT_EQ(report.bytes(), 300 * 260 + 3 * 3 * 4 + 4 * 256 * 130 + 4 * 2 * 2 * 4 + 2 * 260 * 2 +
                                  70 * 50 * 2 + 256 * 200 * 2 + 200 * 300 + 2 * 2 * 2 * 4);
    EXPECT_GT(report.pieces_checksummed(), 0);
    for (const v1::RankLayout& r : destinations_.ranks()) {
      ASSERT_TRUE(InferenceRegistry()
                      .WaitForVersion(r.rank(), version, absl::Now() + absl::Seconds(5))
                      .ok());
    }
    EXPECT_EQ(WrongQuantizedElements(version), 0);
    // The trainer daemon counted the BF16 and F32 it quantized this epoch (colocated, also
    // what it quantized on arrival).
    EXPECT_EQ(trainer_metrics_.quantized_bytes.Value(),
              version * (300 * 260 * 2 + 4 * 256 * 130 * 4 + 70 * 50 * 4 +
                         (GetParam() ? 256 * 200 * 2 + 200 * 300 * 2 : 0)));
  }
  EXPECT_EQ(allocations(), 6);
  EXPECT_GT(trainer_metrics_.quantize_seconds.Value(), 0);
}

// Every rank of a side must declare a quantized tensor alike: an inference rank registered
// again with w's recipe changed (blocks of 64) makes the next refit fail, naming it.
TEST_P(QuantizedRefitTest, AnInferenceRankWithAnotherRecipeIsRefusedByName) {
  ASSERT_TRUE(InferenceRegistry().Deregister(v1::ROLE_DESTINATION, 1).ok());
  v1::LayoutSpec other = destinations_;
  for (v1::TensorSpec& t : *other.mutable_tensors()) {
    if (t.name() != "w") continue;
    t.mutable_quantization()->add_block(64);
    t.mutable_quantization()->add_block(64);
  }
  Register(&InferenceRegistry(), v1::ROLE_DESTINATION, other.ranks(1), other);
  // Until the coordinator holds the new registration (its group no longer agrees).
  ASSERT_TRUE(testing::CoordinatorWithDaemons::Eventually(
      [&]() { return !cluster_.server().cluster().Snapshot().ok(); }));
  ASSERT_NO_FATAL_FAILURE(Publish(1));
  v1::RefitReport report;
  const grpc::Status refit = cluster_.Refit(1, &report, /*deadline_ms=*/20000);
  EXPECT_EQ(refit.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refit.error_message(),
            "w: destination rank 1 declares a dtype, shape or quantization other ranks of its "
            "side do not");
}

INSTANTIATE_TEST_SUITE_P(TrainerAndInferenceNodes, QuantizedRefitTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Colocated" : "TwoNodes";
                         });

}  // namespace
}  // namespace refit::daemon
