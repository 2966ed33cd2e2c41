// Destinations held in block-scaled FP8: the sources as sent, the plan's bytes, and the
// errors that name a tensor, rank and box whose shard edges cut blocks.
#include "planner/quantization.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "planner/check/coverage_checker.h"
#include "planner/layout.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"

namespace refit::planner {
namespace {

using refit::testing::LayoutBuilder;

struct Planned {
  std::vector<v1::QuantizedSource> quantized, on_arrival;
  v1::LayoutSpec sent, received;
  std::shared_ptr<const Plan> plan;
};

Planned PlanQuantized(const LayoutBuilder& src, const LayoutBuilder& dst) {
  Planned out;
  out.sent = src.spec();
  out.received = dst.spec();
  absl::Status sent = SendQuantized(dst.spec(), &out.sent, &out.quantized);
  EXPECT_TRUE(sent.ok()) << sent;
  absl::Status received = ReceiveQuantized(&out.sent, &out.received, &out.on_arrival);
  EXPECT_TRUE(received.ok()) << received;
  absl::StatusOr<Layout> sources = CompileLayout(out.sent, "source");
  absl::StatusOr<Layout> destinations = CompileLayout(out.received, "destination");
  EXPECT_TRUE(sources.ok()) << sources.status();
  EXPECT_TRUE(destinations.ok()) << destinations.status();
  if (!sources.ok() || !destinations.ok()) return out;
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      BuildPlan(*sources, *destinations, DgxH100Topology(), PlanOptions());
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return out;
  out.plan = *plan;
  EXPECT_TRUE(check::CheckCoverage(*sources, *destinations, **plan).ok());
  return out;
}

std::string ErrorOf(const LayoutBuilder& src, const LayoutBuilder& dst) {
  v1::LayoutSpec sent = src.spec();
  std::vector<v1::QuantizedSource> quantized;
  absl::Status status = SendQuantized(dst.spec(), &sent, &quantized);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

// A [300, 260] BF16 weight in row bands of whole blocks on two trainers, to two inference
// ranks holding column bands (the second band 4 columns: the tensor's edge cuts its blocks)
// with the scales of their blocks.
void RowsToColumns(LayoutBuilder* src, LayoutBuilder* dst) {
  src->Tensor("w", {300, 260}, "BF16").Tensor("norm", {260}, "BF16");
  src->Rank(0, "trainer", 0).View(0, "w", {0, 0}, {256, 260}).View(0, "norm", {0}, {260});
  src->Rank(1, "trainer", 1).View(1, "w", {256, 0}, {44, 260});
  dst->BlockFp8("w", {300, 260}, "w_scale_inv").Tensor("norm", {260}, "BF16");
  dst->Rank(0, "inference", 0).View(0, "w", {0, 0}, {300, 256});
  dst->View(0, "w_scale_inv", {0, 0}, {3, 2}).View(0, "norm", {0}, {260});
  dst->Rank(1, "inference", 1).View(1, "w", {0, 256}, {300, 4});
  dst->View(1, "w_scale_inv", {0, 2}, {3, 1}).View(1, "norm", {0}, {260});
}

TEST(QuantizationTest, ThePlanMovesCodesAndTheScalesOfWholeBlocks) {
  LayoutBuilder src, dst;
  RowsToColumns(&src, &dst);
  const Planned planned = PlanQuantized(src, dst);
  ASSERT_NE(planned.plan, nullptr);
  // Every element once as a 1-byte code, every block's scale once, the norm in BF16 twice.
  EXPECT_EQ(planned.plan->stats.total_bytes, 300 * 260 + 3 * 3 * 4 + 2 * 260 * 2);
  ASSERT_EQ(planned.quantized.size(), 2u);
  const v1::QuantizedSource& first = planned.quantized[0];
  EXPECT_EQ(first.rank(), 0);
  EXPECT_EQ(first.view(), 0);
  EXPECT_EQ(first.scale_view(), 2);  // after the rank's two views
  EXPECT_EQ(first.source_dtype(), "BF16");
  EXPECT_EQ(std::vector<int64_t>(first.block().begin(), first.block().end()),
            (std::vector<int64_t>{128, 128}));
  const v1::QuantizedSource& second = planned.quantized[1];
  EXPECT_EQ(second.rank(), 1);
  EXPECT_EQ(second.scale_view(), 1);
  // The sources as sent: w in codes, and each w view's block scales on its rank.
  EXPECT_EQ(planned.sent.tensors(0).dtype(), "F8_E4M3");
  const v1::ShardView& scales = planned.sent.ranks(1).views(1);
  EXPECT_EQ(scales.tensor(), "w_scale_inv");
  EXPECT_EQ(std::vector<int64_t>(scales.offset().begin(), scales.offset().end()),
            (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(std::vector<int64_t>(scales.extent().begin(), scales.extent().end()),
            (std::vector<int64_t>{1, 3}));
}

TEST(QuantizationTest, WithoutQuantizationTheSameRefitMovesTheSourcesPrecision) {
  LayoutBuilder src, dst;
  RowsToColumns(&src, &dst);
  const v1::LayoutSpec plain = WithoutQuantization(dst.spec(), src.spec());
  absl::StatusOr<Layout> sources = CompileLayout(src.spec(), "source");
  absl::StatusOr<Layout> destinations = CompileLayout(plain, "destination");
  ASSERT_TRUE(sources.ok() && destinations.ok()) << destinations.status();
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      BuildPlan(*sources, *destinations, DgxH100Topology(), PlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats.total_bytes, 300 * 260 * 2 + 2 * 260 * 2);
  EXPECT_EQ(destinations->tensor_by_name.count("w_scale_inv"), 0u);
}

TEST(QuantizationTest, StackedExpertsHaveABlockGridPerExpert) {
  LayoutBuilder src, dst;
  src.Tensor("experts", {4, 256, 130}, "F32");
  src.Rank(0, "trainer", 0).View(0, "experts", {0, 0, 0}, {2, 256, 130});
  src.Rank(1, "trainer", 1).View(1, "experts", {2, 0, 0}, {2, 256, 130});
  dst.BlockFp8("experts", {4, 256, 130}, "experts_scale_inv");
  for (int r = 0; r < 2; ++r) {
    dst.Rank(r, "inference", r).View(r, "experts", {0, 128 * r, 0}, {4, 128, 130});
    dst.View(r, "experts_scale_inv", {0, r, 0}, {4, 1, 2});
  }
  const Planned planned = PlanQuantized(src, dst);
  ASSERT_NE(planned.plan, nullptr);
  EXPECT_EQ(planned.plan->stats.total_bytes, 4 * 256 * 130 + 4 * 2 * 2 * 4);
  ASSERT_EQ(planned.quantized.size(), 2u);
  EXPECT_EQ(std::vector<int64_t>(planned.quantized[1].block().begin(),
                                 planned.quantized[1].block().end()),
            (std::vector<int64_t>{1, 128, 128}));
}

TEST(QuantizationTest, SourcesAlreadyInCodesAreMovedAsTheyAre) {
  LayoutBuilder src, dst;
  src.BlockFp8("w", {128, 256}, "w_scale_inv");
  src.Rank(0, "trainer", 0).View(0, "w", {0, 0}, {128, 256}).View(0, "w_scale_inv", {0, 0}, {1, 2});
  dst.BlockFp8("w", {128, 256}, "w_scale_inv");
  dst.Rank(0, "inference", 0).View(0, "w", {0, 0}, {128, 256});
  dst.View(0, "w_scale_inv", {0, 0}, {1, 2});
  const Planned planned = PlanQuantized(src, dst);
  EXPECT_TRUE(planned.quantized.empty());
  EXPECT_EQ(planned.sent.SerializeAsString(), src.spec().SerializeAsString());
}

// An FSDP-style trainer's float32 rows, uneven, into an engine's bfloat16 columns: a cast
// needs no block alignment and moves 2 bytes per element.
TEST(QuantizationTest, AnF32SourceCastToBf16MovesTwoBytesAnElementFromAnyBoxes) {
  LayoutBuilder src, dst;
  src.Tensor("w", {70, 50}, "F32");
  src.Rank(0, "trainer", 0).View(0, "w", {0, 0}, {33, 50});
  src.Rank(1, "trainer", 1).View(1, "w", {33, 0}, {7, 50});
  src.Rank(2, "trainer", 2).View(2, "w", {40, 0}, {30, 50});
  dst.Tensor("w", {70, 50}, "BF16");
  dst.Rank(0, "inference", 0).View(0, "w", {0, 0}, {70, 17});
  dst.Rank(1, "inference", 1).View(1, "w", {0, 17}, {70, 33});
  v1::LayoutSpec spec = dst.spec();
  spec.mutable_tensors(0)->mutable_quantization()->set_scheme("cast");
  v1::LayoutSpec sent = src.spec();
  std::vector<v1::QuantizedSource> quantized;
  ASSERT_TRUE(SendQuantized(spec, &sent, &quantized).ok());
  ASSERT_EQ(quantized.size(), 3u);
  EXPECT_EQ(quantized[1].scheme(), "cast");
  EXPECT_EQ(quantized[1].scale_view(), -1);
  EXPECT_EQ(sent.tensors(0).dtype(), "BF16");
  EXPECT_EQ(sent.ranks(0).views_size(), 1);  // no scale views
  absl::StatusOr<Layout> sources = CompileLayout(sent, "source");
  absl::StatusOr<Layout> destinations = CompileLayout(spec, "destination");
  ASSERT_TRUE(sources.ok() && destinations.ok());
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      BuildPlan(*sources, *destinations, DgxH100Topology(), PlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats.total_bytes, 70 * 50 * 2);
  // What the cast must be: F32 to BF16 only.
  spec.mutable_tensors(0)->set_dtype("F16");
  v1::LayoutSpec again = src.spec();
  EXPECT_EQ(SendQuantized(spec, &again, &quantized).message(),
            "destination tensor \"w\": cast rounds F32 to BF16, not to F16");
  spec.mutable_tensors(0)->set_dtype("BF16");
  spec.mutable_tensors(0)->mutable_quantization()->set_scale_tensor("s");
  EXPECT_EQ(SendQuantized(spec, &again, &quantized).message(),
            "destination tensor \"w\": cast takes no scale_tensor or block");
}

TEST(QuantizationErrorsTest, ADestinationViewThatCutsBlocksIsNamed) {
  LayoutBuilder src, dst;
  src.Tensor("w", {256, 256}, "BF16");
  src.Rank(0, "trainer", 0).View(0, "w", {0, 0}, {256, 256});
  dst.BlockFp8("w", {256, 256}, "w_scale_inv");
  dst.Rank(0, "inference", 0).View(0, "w", {0, 0}, {100, 256});
  dst.View(0, "w_scale_inv", {0, 0}, {1, 2});
  dst.Rank(1, "inference", 1).View(1, "w", {100, 0}, {156, 256});
  dst.View(1, "w_scale_inv", {0, 0}, {2, 2});
  EXPECT_EQ(ErrorOf(src, dst),
            "destination rank 0: view 0 of \"w\" holds [0:100, 0:256], which cuts its 128 x 128 "
            "quantization blocks (a view of a quantized tensor starts at a block corner and ends "
            "at a block edge or the tensor's end, in the dims its blocks tile)");
}

TEST(QuantizationErrorsTest, ADestinationRankWithoutItsBlocksScalesIsNamed) {
  LayoutBuilder src, dst;
  src.Tensor("w", {256, 256}, "BF16");
  src.Rank(0, "trainer", 0).View(0, "w", {0, 0}, {256, 256});
  dst.BlockFp8("w", {256, 256}, "w_scale_inv");
  dst.Rank(0, "inference", 0).View(0, "w", {128, 0}, {128, 256});
  dst.View(0, "w_scale_inv", {0, 0}, {1, 2});  // the scales of the other rows
  EXPECT_EQ(ErrorOf(src, dst),
            "destination rank 0: view 0 of \"w\" holds [128:256, 0:256], but no view of "
            "\"w_scale_inv\" on the rank holds the scales of its blocks [1:2, 0:2]");
}

// FSDP2-like rows (112 and 144: the first block cut between the trainers) of w, and rows of
// whole blocks of v, to two inference ranks holding column halves in FP8.
void CutAndWholeBlocks(LayoutBuilder* src, LayoutBuilder* dst) {
  src->Tensor("w", {256, 256}, "BF16").Tensor("v", {256, 256}, "BF16");
  src->Rank(0, "trainer", 0).View(0, "w", {0, 0}, {112, 256}).View(0, "v", {0, 0}, {128, 256});
  src->Rank(1, "trainer", 1).View(1, "w", {112, 0}, {144, 256}).View(1, "v", {128, 0}, {128, 256});
  dst->BlockFp8("w", {256, 256}, "w_scale_inv").BlockFp8("v", {256, 256}, "v_scale_inv");
  for (int r = 0; r < 2; ++r) {
    dst->Rank(r, "inference", r).View(r, "w_scale_inv", {0, r}, {2, 1});
    dst->View(r, "w", {0, 128 * r}, {256, 128}).View(r, "v", {0, 128 * r}, {256, 128});
    dst->View(r, "v_scale_inv", {0, r}, {2, 1});
  }
}

TEST(QuantizationTest, BlocksCutBetweenSourceRanksAreQuantizedOnArrival) {
  LayoutBuilder src, dst;
  CutAndWholeBlocks(&src, &dst);
  const Planned planned = PlanQuantized(src, dst);
  ASSERT_NE(planned.plan, nullptr);
  // w crosses in BF16 (no source rank holds its first block row whole), v in codes plus
  // its scales; w's scales cross not at all (the inference daemons compute them).
  EXPECT_EQ(planned.plan->stats.total_bytes, 256 * 256 * 2 + 256 * 256 + 2 * 2 * 4);
  ASSERT_EQ(planned.quantized.size(), 2u);
  for (const v1::QuantizedSource& q : planned.quantized) EXPECT_EQ(q.tensor(), "v");
  ASSERT_EQ(planned.on_arrival.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const v1::QuantizedSource& q = planned.on_arrival[r];
    EXPECT_EQ(q.rank(), r);
    EXPECT_EQ(q.tensor(), "w");
    EXPECT_EQ(q.view(), 1);
    EXPECT_EQ(q.scale_view(), 0);  // the rank's own view of the scales, before the weight's
    EXPECT_EQ(q.scale_tensor(), "w_scale_inv");
    EXPECT_EQ(q.source_dtype(), "BF16");
    EXPECT_EQ(std::vector<int64_t>(q.offset().begin(), q.offset().end()),
              (std::vector<int64_t>{0, 128 * r}));
  }
  // The destinations as received: w in BF16, the views of its scales holding nothing.
  EXPECT_EQ(planned.received.tensors(0).dtype(), "BF16");
  EXPECT_FALSE(planned.received.tensors(0).has_quantization());
  EXPECT_EQ(planned.received.tensors(2).dtype(), "F8_E4M3");  // v stays in codes
  for (const v1::RankLayout& rank : planned.received.ranks()) {
    EXPECT_EQ(rank.views(0).extent(0) * rank.views(0).extent(1), 0);
    EXPECT_EQ(rank.views(3).extent(0) * rank.views(3).extent(1), 2);  // v's scales
  }
}

// Trainers holding FP8 codes in uneven row bands (cutting blocks) and the scales of the
// blocks their rows touch, into BF16 column bands that cut blocks too.
void CodesToValues(LayoutBuilder* src, LayoutBuilder* dst) {
  src->Tensor("w", {300, 260}, "F8_E4M3").Tensor("w_scale_inv", {3, 3}, "F32");
  src->Rank(0, "trainer", 0).View(0, "w", {0, 0}, {150, 260});
  src->View(0, "w_scale_inv", {0, 0}, {2, 3});
  src->Rank(1, "trainer", 1).View(1, "w", {150, 0}, {150, 260});
  src->View(1, "w_scale_inv", {1, 0}, {2, 3});
  dst->Dequantized("w", {300, 260}, "BF16", "w_scale_inv");
  dst->Rank(0, "inference", 0).View(0, "w", {0, 0}, {300, 130});
  dst->Rank(1, "inference", 1).View(1, "w", {0, 130}, {300, 130});
}

TEST(QuantizationTest, DequantizedTensorsReceiveCodesAndTheScalesOfTheirBlocks) {
  LayoutBuilder src, dst;
  CodesToValues(&src, &dst);
  const Planned planned = PlanQuantized(src, dst);
  ASSERT_NE(planned.plan, nullptr);
  // Every code once, and each inference rank the scales of the 3 x 2 blocks its columns
  // touch (block column 1 to both).
  EXPECT_EQ(planned.plan->stats.total_bytes, 300 * 260 + 2 * 3 * 2 * 4);
  EXPECT_TRUE(planned.quantized.empty());
  ASSERT_EQ(planned.on_arrival.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const v1::QuantizedSource& q = planned.on_arrival[r];
    EXPECT_EQ(q.scheme(), kDequantize);
    EXPECT_EQ(q.source_dtype(), "F8_E4M3");
    EXPECT_EQ(q.view(), 0);
    EXPECT_EQ(q.scale_view(), 1);  // appended
    const v1::ShardView& scales = planned.received.ranks(r).views(1);
    EXPECT_EQ(scales.tensor(), "w_scale_inv");
    EXPECT_EQ(scales.offset(1), r);
    EXPECT_EQ(scales.extent(1), 2);
  }
  EXPECT_EQ(planned.received.tensors(0).dtype(), "F8_E4M3");
}

// One scale per output channel (blocks of 1 x 512, vLLM's per-channel weight_scale [512, 1])
// from FSDP2 trainers (rows) into a row-parallel engine (columns: each rank holds half of
// every channel and the scales of its rows); one scale per tensor (a block of the whole
// matrix) from a trainer holding it whole into row halves.
TEST(QuantizationTest, PerChannelAndPerTensorScalesAreBlocksSpanningWholeDims) {
  LayoutBuilder src, dst;
  src.Tensor("o_proj", {512, 512}, "BF16").Tensor("q_proj", {512, 512}, "BF16");
  src.Rank(0, "trainer", 0).View(0, "o_proj", {0, 0}, {171, 512});
  src.View(0, "q_proj", {0, 0}, {512, 512});
  src.Rank(1, "trainer", 1).View(1, "o_proj", {171, 0}, {341, 512});
  dst.BlockFp8("o_proj", {512, 512}, "o_proj_scale").BlockFp8("q_proj", {512, 512}, "q_scale");
  for (int r = 0; r < 2; ++r) {
    dst.Rank(r, "inference", r).View(r, "o_proj", {0, 256 * r}, {512, 256});
    dst.View(r, "o_proj_scale", {0, 0}, {512, 1});
    dst.View(r, "q_proj", {256 * r, 0}, {256, 512}).View(r, "q_scale", {0, 0}, {1, 1});
  }
  v1::LayoutSpec destinations = dst.spec();
  // The weight's block and its scale tensor's shape.
  auto set_block = [&](const std::string& name, const std::string& scale, int64_t rows,
                       int64_t cols) {
    for (v1::TensorSpec& t : *destinations.mutable_tensors()) {
      if (t.name() == name) {
        t.mutable_quantization()->add_block(rows);
        t.mutable_quantization()->add_block(cols);
      } else if (t.name() == scale) {
        t.clear_shape();
        t.add_shape(512 / rows);
        t.add_shape(512 / cols);
      }
    }
  };
  set_block("o_proj", "o_proj_scale", 1, 512);
  set_block("q_proj", "q_scale", 512, 512);
  v1::LayoutSpec sent = src.spec(), received = destinations;
  std::vector<v1::QuantizedSource> quantized, on_arrival;
  const absl::Status status = SendQuantized(destinations, &sent, &quantized);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(ReceiveQuantized(&sent, &received, &on_arrival).ok());
  EXPECT_EQ(quantized.size(), 3u);  // two o_proj row bands, the whole q_proj
  EXPECT_TRUE(on_arrival.empty());
  absl::StatusOr<Layout> sources = CompileLayout(sent, "source");
  absl::StatusOr<Layout> compiled = CompileLayout(received, "destination");
  ASSERT_TRUE(sources.ok() && compiled.ok()) << sources.status() << compiled.status();
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      BuildPlan(*sources, *compiled, DgxH100Topology(), PlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Every code once; each rank all 512 channel scales and the tensor's one scale.
  EXPECT_EQ((*plan)->stats.total_bytes, 2 * 512 * 512 + 2 * (512 + 1) * 4);
  // A row-parallel trainer cuts the channels too: nobody holds one whole.
  LayoutBuilder cut_src;
  cut_src.Tensor("o_proj", {512, 512}, "BF16").Tensor("q_proj", {512, 512}, "BF16");
  cut_src.Rank(0, "trainer", 0).View(0, "o_proj", {0, 0}, {512, 256});
  cut_src.View(0, "q_proj", {0, 0}, {512, 512});
  cut_src.Rank(1, "trainer", 1).View(1, "o_proj", {0, 256}, {512, 256});
  sent = cut_src.spec();
  received = destinations;
  ASSERT_TRUE(SendQuantized(destinations, &sent, &quantized).ok());
  EXPECT_EQ(ReceiveQuantized(&sent, &received, &on_arrival).message(),
            "destination rank 0: view 0 of \"o_proj\" holds [0:512, 0:256], which cuts its 1 x "
            "512 quantization blocks, and source ranks cut them too: no rank holds such a block "
            "whole to quantize it");
}

TEST(QuantizationErrorsTest, ADequantizationIsChecked) {
  struct Case {
    std::function<void(v1::LayoutSpec* sources, v1::LayoutSpec* destinations)> change;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](v1::LayoutSpec* s, v1::LayoutSpec*) { s->mutable_tensors(0)->set_dtype("BF16"); },
       "destination tensor \"w\": dequantize reads F8_E4M3 codes, but the sources hold BF16"},
      {[](v1::LayoutSpec*, v1::LayoutSpec* d) { d->mutable_tensors(0)->set_dtype("F8_E4M3"); },
       "destination tensor \"w\": dequantize gives BF16 or F32 values, not F8_E4M3"},
      {[](v1::LayoutSpec* s, v1::LayoutSpec*) { s->mutable_tensors(1)->set_name("other"); },
       "destination tensor \"w\": its scale tensor \"w_scale_inv\" is not a source tensor"},
      {[](v1::LayoutSpec*, v1::LayoutSpec* d) {
         v1::TensorSpec* scale = d->add_tensors();
         scale->set_name("w_scale_inv");
         scale->set_dtype("F32");
         scale->add_shape(3);
         scale->add_shape(3);
       },
       "destination tensor \"w_scale_inv\": the destinations receive it only to dequantize "
       "\"w\", so they may not declare it"},
  };
  for (const Case& c : cases) {
    LayoutBuilder src, dst;
    CodesToValues(&src, &dst);
    v1::LayoutSpec sources = src.spec(), destinations = dst.spec();
    c.change(&sources, &destinations);
    std::vector<v1::QuantizedSource> quantized, on_arrival;
    absl::Status status = SendQuantized(destinations, &sources, &quantized);
    if (status.ok()) status = ReceiveQuantized(&sources, &destinations, &on_arrival);
    EXPECT_EQ(status.message(), c.error);
  }
}

TEST(QuantizationErrorsTest, ABucketedRankCannotQuantizeOnArrival) {
  LayoutBuilder src, dst;
  CutAndWholeBlocks(&src, &dst);
  v1::LayoutSpec sent = src.spec(), received = dst.spec();
  received.mutable_ranks(1)->set_bucketed(true);
  std::vector<v1::QuantizedSource> quantized, on_arrival;
  ASSERT_TRUE(SendQuantized(received, &sent, &quantized).ok());
  EXPECT_EQ(ReceiveQuantized(&sent, &received, &on_arrival).message(),
            "destination rank 1: view 1 of \"w\": its blocks are cut between source ranks, so "
            "they are quantized on arrival, which needs the rank's memory; a bucketed rank has "
            "none on its daemon");
}

TEST(QuantizationErrorsTest, TheRecipeIsChecked) {
  LayoutBuilder src;
  src.Tensor("w", {256, 256}, "I32");
  src.Rank(0, "trainer", 0).View(0, "w", {0, 0}, {256, 256});
  auto destinations = [](const std::function<void(v1::LayoutSpec*)>& change) {
    LayoutBuilder dst;
    dst.BlockFp8("w", {256, 256}, "w_scale_inv");
    dst.Rank(0, "inference", 0).View(0, "w", {0, 0}, {256, 256});
    dst.View(0, "w_scale_inv", {0, 0}, {2, 2});
    v1::LayoutSpec spec = dst.spec();
    change(&spec);
    return spec;
  };
  struct Case {
    std::function<void(v1::LayoutSpec*)> change;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](v1::LayoutSpec*) {},
       "destination tensor \"w\": block_fp8 quantizes BF16 or F32, but the sources hold I32"},
      {[](v1::LayoutSpec* s) { s->mutable_tensors(0)->mutable_quantization()->set_scheme("mx"); },
       "destination tensor \"w\": quantization scheme \"mx\" is not known (expected "
       "\"block_fp8\", \"cast\" or \"dequantize\")"},
      {[](v1::LayoutSpec* s) { s->mutable_tensors(0)->mutable_quantization()->set_recipe("e8m0"); },
       "destination tensor \"w\": quantization recipe \"e8m0\" is not known (expected deepgemm, "
       "divide or pow2)"},
      {[](v1::LayoutSpec* s) { s->mutable_tensors(0)->set_dtype("F8_E5M2"); },
       "destination tensor \"w\": block_fp8 holds F8_E4M3 codes, not F8_E5M2"},
      {[](v1::LayoutSpec* s) { s->mutable_tensors(1)->set_shape(0, 3); },
       "destination tensor \"w\": its scale tensor \"w_scale_inv\" is F32 [3, 2]; blocks of "
       "128 x 128 need F32 [2, 2]"},
      {[](v1::LayoutSpec* s) {
         s->mutable_tensors(0)->mutable_quantization()->set_scale_tensor("missing");
       },
       "destination tensor \"w\": its scale tensor \"missing\" is not a destination tensor"},
      {[](v1::LayoutSpec* s) {
         v1::Quantization* q = s->mutable_tensors(0)->mutable_quantization();
         q->add_block(0);
         q->add_block(128);
       },
       "destination tensor \"w\": quantization block [0, 128] has a dim that is not positive"},

  };
  for (const Case& c : cases) {
    v1::LayoutSpec sent = src.spec();
    std::vector<v1::QuantizedSource> quantized;
    const absl::Status status = SendQuantized(destinations(c.change), &sent, &quantized);
    EXPECT_EQ(status.message(), c.error);
  }
}

}  // namespace
}  // namespace refit::planner
