// Source views sent quantized in the buffer map: read as codes and block scales equal to the
// reference quantizer's, written as registered, and restored when the list goes. A staged
// destination view quantized on arrival: written wide, quantized into the shadow, committed
// as the reference's codes and scales.
#include "transport/quantized_view.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "planner/quantization.h"
#include "planner/testing/layout_builder.h"
#include "transport/testing/backed_layouts.h"
#include "transport/testing/reference_quantizer.h"

namespace refit::transport {
namespace {

class QuantizedViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // w: BF16 rows padded to 1200 elements in a fused buffer (a strided view of 3 bands of
    // 384 rows); b: F32 stacked matrices, dense.
    refit::testing::LayoutBuilder src, dst;
    src.Tensor("w", {1000, 1100}, "BF16").Tensor("b", {3, 200, 300}, "F32");
    src.Rank(0, "trainer", 0).Buffer(0, "fused", 64 + 1000 * 1200 * 2);
    src.View(0, "w", {0, 0}, {1000, 1100}, "fused", 64, {1200, 1});
    src.View(0, "b", {0, 0, 0}, {3, 200, 300});
    dst.BlockFp8("w", {1000, 1100}, "w_scale_inv").BlockFp8("b", {3, 200, 300}, "b_scale_inv");
    dst.Rank(0, "inference", 0).View(0, "w", {0, 0}, {1000, 1100});
    dst.View(0, "w_scale_inv", {0, 0}, {8, 9}).View(0, "b", {0, 0, 0}, {3, 200, 300});
    dst.View(0, "b_scale_inv", {0, 0, 0}, {3, 2, 3});
    sources_ = backed_.Back(src.spec(), "source");
    destinations_ = backed_.Back(dst.spec(), "destination");
    v1::LayoutSpec sent = sources_;
    ASSERT_TRUE(planner::SendQuantized(dst.spec(), &sent, &quantized_).ok());
    ASSERT_EQ(quantized_.size(), 2u);
    map_ = BufferMap(testing::TensorsOf(sources_));
    ASSERT_TRUE(map_.AddRank(v1::ROLE_SOURCE, sources_.ranks(0)).ok());
    // Random weights over six decades, in each view's dtype.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (int v = 0; v < 2; ++v) {
      const Dims& extent = v == 0 ? Dims{1, 1000, 1100} : Dims{3, 200, 300};
      const int64_t rows = extent[1], cols = extent[2];
      auto memory = map_.LocateForWrite(v1::ROLE_SOURCE, 0, v, v == 0 ? "w" : "b",
                                        v == 0 ? Dims{0, 0} : Dims{0, 0, 0},
                                        v == 0 ? Dims{1000, 1100} : Dims{3, 200, 300});
      ASSERT_TRUE(memory.ok()) << memory.status();
      std::vector<float>& values = v == 0 ? w_ : b_;
      for (int64_t m = 0; m < extent[0]; ++m) {
        for (int64_t r = 0; r < rows; ++r) {
          const float magnitude = std::pow(10.0f, static_cast<float>((r / 128 + m) % 6) - 3.0f);
          for (int64_t c = 0; c < cols; ++c) {
            float x = magnitude * unit(rng);
            const int64_t element = v == 0 ? r * memory->strides[0] + c
                                           : m * memory->strides[0] + r * memory->strides[1] + c;
            if (v == 0) {
              const uint32_t bits = uint32_t{testing::ReferenceBf16(x)} << 16;
              std::memcpy(&x, &bits, 4);
              std::memcpy(memory->base + element * 2, reinterpret_cast<const char*>(&bits) + 2, 2);
            } else {
              std::memcpy(memory->base + element * 4, &x, 4);
            }
            values.push_back(x);
          }
        }
      }
    }
  }

  // Codes and scales read through the map (as sent) that differ from the reference's.
  int64_t WrongAsSent() {
    int64_t wrong = 0;
    for (const v1::QuantizedSource& q : quantized_) {
      const bool is_w = q.tensor() == "w";
      const int64_t matrices = is_w ? 1 : 3, rows = is_w ? 1000 : 200, cols = is_w ? 1100 : 300;
      const Dims extent(q.extent().begin(), q.extent().end());
      auto codes = map_.Locate(v1::ROLE_SOURCE, 0, q.view(), q.tensor(),
                               Dims(q.offset().begin(), q.offset().end()), extent);
      const Dims blocks = is_w ? Dims{8, 9} : Dims{3, 2, 3};
      auto scales = map_.Locate(v1::ROLE_SOURCE, 0, q.scale_view(), q.scale_tensor(),
                                Dims(blocks.size(), 0), blocks);
      EXPECT_TRUE(codes.ok() && scales.ok()) << codes.status() << scales.status();
      if (!codes.ok() || !scales.ok()) return -1;
      const std::vector<float>& values = is_w ? w_ : b_;
      for (int64_t m = 0; m < matrices; ++m) {
        const std::vector<float> x(values.begin() + m * rows * cols,
                                   values.begin() + (m + 1) * rows * cols);
        const testing::ReferenceBlocks expected = testing::ReferenceQuantize(x, rows, cols);
        for (int64_t i = 0; i < rows * cols; ++i) {
          wrong += codes->base[m * rows * cols + i] != expected.codes[i];
        }
        const int64_t per_matrix = static_cast<int64_t>(expected.scales.size());
        wrong += std::memcmp(scales->base + m * per_matrix * 4, expected.scales.data(),
                             per_matrix * 4) != 0;
      }
    }
    return wrong;
  }

  testing::BackedLayouts backed_;
  v1::LayoutSpec sources_, destinations_;
  std::vector<v1::QuantizedSource> quantized_;
  BufferMap map_;
  std::vector<float> w_, b_;  // the weights as the rank holds them, row-major
};

TEST_F(QuantizedViewTest, ViewsAreReadAsTheReferenceCodesAndScalesOfTheirMemory) {
  ASSERT_TRUE(map_.SendQuantized(quantized_).ok());
  EXPECT_EQ(map_.tensors().at("w").element_bytes, 1);
  EXPECT_EQ(map_.tensors().at("w_scale_inv").element_bytes, 4);
  EXPECT_EQ(map_.tensors().at("b_scale_inv").shape, (Dims{3, 2, 3}));
  EXPECT_EQ(map_.QuantizedBytes(v1::ROLE_SOURCE),
            1000 * 1100 + 8 * 9 * 4 + 3 * 200 * 300 + 3 * 2 * 3 * 4);
  absl::StatusOr<int64_t> read = map_.QuantizeSent(/*threads=*/2);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, 1000 * 1100 * 2 + 3 * 200 * 300 * 4);
  EXPECT_EQ(WrongAsSent(), 0);
  // Written as registered: the trainer's BF16, which the next quantization reads.
  auto registered = map_.LocateForWrite(v1::ROLE_SOURCE, 0, 0, "w", {0, 0}, {1, 1});
  ASSERT_TRUE(registered.ok());
  uint16_t first;
  std::memcpy(&first, registered->base, 2);
  uint32_t expected_bits;
  std::memcpy(&expected_bits, &w_[0], 4);
  EXPECT_EQ(first, expected_bits >> 16);
  // The same list keeps the memory; none restores the views as registered.
  ASSERT_TRUE(map_.SendQuantized(quantized_).ok());
  EXPECT_EQ(WrongAsSent(), 0);
  ASSERT_TRUE(map_.SendQuantized({}).ok());
  EXPECT_EQ(map_.tensors().at("w").element_bytes, 2);
  EXPECT_EQ(map_.tensors().count("w_scale_inv"), 0u);
  EXPECT_EQ(map_.QuantizedBytes(v1::ROLE_SOURCE), 0);
  auto read_back = map_.Locate(v1::ROLE_SOURCE, 0, 0, "w", {0, 0}, {1, 1});
  ASSERT_TRUE(read_back.ok());
  EXPECT_EQ(read_back->base, registered->base);
}

TEST_F(QuantizedViewTest, AListThatDisagreesWithTheRegistrationIsRefusedByName) {
  std::vector<v1::QuantizedSource> wrong = quantized_;
  wrong[0].set_source_dtype("F32");
  const absl::Status refused = map_.SendQuantized(wrong);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "source rank 0: view 0 of \"w\" holds 2-byte elements; the plan quantizes it from F32");
  EXPECT_EQ(map_.tensors().at("w").element_bytes, 2);  // nothing changed
  EXPECT_EQ(map_.QuantizedBytes(v1::ROLE_SOURCE), 0);
  wrong = quantized_;
  wrong[1].set_scale_view(7);
  EXPECT_EQ(map_.SendQuantized(wrong).message(),
            "source rank 0: the plan quantizes view 1 with scales as view 7, which the rank's 2 "
            "views do not allow");
}

TEST_F(QuantizedViewTest, ATrainerAndAnInferenceRankOfOneDaemonEachDeclareTheirDtype) {
  // One daemon serves the trainer rank (w in BF16) and the inference rank (w in codes).
  BufferMap shared;
  const TensorTable source_tensors = testing::TensorsOf(sources_);
  const TensorTable destination_tensors = testing::TensorsOf(destinations_);
  ASSERT_TRUE(shared.AddRank(v1::ROLE_SOURCE, sources_.ranks(0), &source_tensors).ok());
  EXPECT_EQ(shared.tensors().at("w").element_bytes, 2);
  const absl::Status added =
      shared.AddRank(v1::ROLE_DESTINATION, destinations_.ranks(0), &destination_tensors);
  ASSERT_TRUE(added.ok()) << added;
  EXPECT_EQ(shared.tensors().at("w").element_bytes, 1);  // what moves: the destinations' dtype
  EXPECT_EQ(shared.tensors().at("w_scale_inv").element_bytes, 4);
  // Each rank's views are resolved in its own dtype: the destination's 1 100 codes a row,
  // the source's padded BF16 rows.
  auto codes = shared.Locate(v1::ROLE_DESTINATION, 0, 0, "w", {1, 0}, {1, 1});
  auto destination_start = shared.Locate(v1::ROLE_DESTINATION, 0, 0, "w", {0, 0}, {1, 1});
  auto wide = shared.Locate(v1::ROLE_SOURCE, 0, 0, "w", {1, 0}, {1, 1});
  auto source_start = shared.Locate(v1::ROLE_SOURCE, 0, 0, "w", {0, 0}, {1, 1});
  ASSERT_TRUE(codes.ok() && destination_start.ok() && wide.ok() && source_start.ok());
  EXPECT_EQ(codes->base - destination_start->base, 1100);
  EXPECT_EQ(wide->base - source_start->base, 1200 * 2);
  ASSERT_TRUE(shared.SendQuantized(quantized_).ok());
  ASSERT_TRUE(shared.QuantizeSent(1).ok());
  shared.RemoveRank(v1::ROLE_DESTINATION, 0);
  EXPECT_EQ(shared.tensors().at("w").element_bytes, 1);  // still sent quantized
  ASSERT_TRUE(shared.SendQuantized({}).ok());
  EXPECT_EQ(shared.tensors().at("w").element_bytes, 2);
}

// The codes and scales an inference rank's registered memory holds that differ from the
// reference quantizer's of w.
int64_t WrongCodesOfW(const BufferMap& map, const std::vector<float>& w) {
  auto codes = map.LocateAsRegistered(v1::ROLE_DESTINATION, 0, 0, "w", {0, 0}, {1000, 1100});
  auto scales = map.LocateAsRegistered(v1::ROLE_DESTINATION, 0, 1, "w_scale_inv", {0, 0}, {8, 9});
  EXPECT_TRUE(codes.ok() && scales.ok()) << codes.status() << scales.status();
  if (!codes.ok() || !scales.ok()) return -1;
  const testing::ReferenceBlocks expected = testing::ReferenceQuantize(w, 1000, 1100);
  int64_t wrong = 0;
  for (int64_t r = 0; r < 1000; ++r) {
    for (int64_t c = 0; c < 1100; ++c) {
      wrong += codes->base[r * codes->strides[0] + c] != expected.codes[r * 1100 + c];
    }
  }
  for (int64_t b = 0; b < 8 * 9; ++b) {
    wrong += std::memcmp(scales->base + (b / 9 * scales->strides[0] + b % 9) * 4,
                         &expected.scales[b], 4) != 0;
  }
  return wrong;
}

TEST_F(QuantizedViewTest, AStagedRankQuantizesOnArrivalIntoItsShadowAndCommitsTheCodes) {
  // The inference rank's codes in a padded (strided) buffer, staged; w arrives in BF16.
  refit::testing::LayoutBuilder dst;
  dst.BlockFp8("w", {1000, 1100}, "w_scale_inv");
  dst.Rank(0, "inference", 0).Buffer(0, "codes", 1000 * 1152);
  dst.View(0, "w", {0, 0}, {1000, 1100}, "codes", 0, {1152, 1});
  dst.View(0, "w_scale_inv", {0, 0}, {8, 9});
  testing::BackedLayouts backed;
  v1::LayoutSpec destinations = backed.Back(dst.spec(), "destination");
  const TensorTable tensors = testing::TensorsOf(destinations);
  v1::RankLayout staged = destinations.ranks(0);
  staged.set_staged(true);
  BufferMap map, reader;  // `reader` maps the same buffers unstaged: what the rank sees
  ASSERT_TRUE(map.AddRank(v1::ROLE_DESTINATION, staged, &tensors).ok());
  ASSERT_TRUE(reader.AddRank(v1::ROLE_DESTINATION, destinations.ranks(0), &tensors).ok());
  v1::QuantizedSource arriving;
  arriving.set_rank(0);
  arriving.set_view(0);
  arriving.set_scale_view(1);
  arriving.set_tensor("w");
  arriving.set_scale_tensor("w_scale_inv");
  arriving.set_source_dtype("BF16");
  arriving.set_scheme(planner::kBlockFp8);
  for (int64_t b : {128, 128}) arriving.add_block(b);
  for (int64_t o : {0, 0}) arriving.add_offset(o);
  for (int64_t e : {1000, 1100}) arriving.add_extent(e);
  ASSERT_TRUE(map.ReceiveQuantized({arriving}).ok());
  EXPECT_EQ(map.tensors().at("w").element_bytes, 2);  // what moves: the sources' BF16
  EXPECT_EQ(map.QuantizedBytes(v1::ROLE_DESTINATION), 1000 * 1100 * 2);
  map.StageEpoch({0});
  // The data plane's writes: BF16 values into the wide copy.
  auto wide = map.LocateForWrite(v1::ROLE_DESTINATION, 0, 0, "w", {0, 0}, {1000, 1100});
  ASSERT_TRUE(wide.ok()) << wide.status();
  for (int64_t i = 0; i < 1000 * 1100; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w_[i], 4);
    const uint16_t high = static_cast<uint16_t>(bits >> 16);
    std::memcpy(wide->base + (i / 1100 * wide->strides[0] + i % 1100) * 2, &high, 2);
  }
  absl::StatusOr<int64_t> read = map.QuantizeReceived(2);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, 1000 * 1100 * 2);
  EXPECT_EQ(WrongCodesOfW(map, w_), 0);     // in the shadow
  EXPECT_GT(WrongCodesOfW(reader, w_), 0);  // not yet in the rank's memory
  EXPECT_TRUE(map.CommitStaged().empty());
  EXPECT_EQ(WrongCodesOfW(reader, w_), 0);
}

TEST_F(QuantizedViewTest, ABucketedRankCannotQuantizeOnArrival) {
  refit::testing::LayoutBuilder dst;
  dst.BlockFp8("w", {1000, 1100}, "w_scale_inv");
  dst.Rank(0, "inference", 0).View(0, "w", {0, 0}, {1000, 1100});
  dst.View(0, "w_scale_inv", {0, 0}, {8, 9});
  testing::BackedLayouts backed;
  const v1::LayoutSpec destinations = backed.Back(dst.spec(), "destination");
  const TensorTable tensors = testing::TensorsOf(destinations);
  // Its first buffer becomes its bucket; its views have no memory.
  v1::RankLayout rank = destinations.ranks(0);
  const v1::BufferSpec bucket = rank.buffers(0);
  rank.set_bucketed(true);
  rank.clear_buffers();
  *rank.add_buffers() = bucket;
  for (v1::ShardView& v : *rank.mutable_views()) {
    v.clear_buffer();
    v.clear_byte_offset();
    v.clear_strides();
  }
  BufferMap map;
  const absl::Status added = map.AddRank(v1::ROLE_DESTINATION, rank, &tensors);
  ASSERT_TRUE(added.ok()) << added;
  v1::QuantizedSource arriving;
  arriving.set_rank(0);
  arriving.set_view(0);
  arriving.set_scale_view(1);
  arriving.set_tensor("w");
  EXPECT_EQ(map.ReceiveQuantized({arriving}).message(),
            "destination rank 0: the plan quantizes view 0 on arrival, but the rank receives its "
            "weights in buckets (no memory here)");
}

}  // namespace
}  // namespace refit::transport
