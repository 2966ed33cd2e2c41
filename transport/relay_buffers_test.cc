// Relay buffers laid out before a run: one block per device, each buffer's place held
// from the batch of its fill to the batch of its last read, then reused.
#include "transport/relay_buffers.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace refit::transport {
namespace {

// Rows [row, row + rows) of a [64, 256] float tensor "w": 1 KiB a row.
v1::Endpoint RelayBufferOf(int64_t rank, int64_t id, int64_t row, int64_t rows) {
  v1::Endpoint e;
  e.set_kind(v1::ENDPOINT_RELAY_BUFFER);
  e.set_rank(rank);
  e.set_relay_buffer(id);
  e.add_buffer_offset(row);
  e.add_buffer_offset(0);
  e.add_buffer_extent(rows);
  e.add_buffer_extent(256);
  return e;
}

v1::Endpoint ViewOf(v1::EndpointKind kind, int64_t rank) {
  v1::Endpoint e;
  e.set_kind(kind);
  e.set_rank(rank);
  return e;
}

// The whole box of `buffer`: filled from a source view, or read into a destination view.
void Fill(v1::Batch* batch, const v1::Endpoint& buffer) {
  v1::Transfer* t = batch->add_transfers();
  *t->mutable_src() = ViewOf(v1::ENDPOINT_SOURCE_VIEW, 9);
  *t->mutable_dst() = buffer;
  t->set_tensor("w");
  *t->mutable_offset() = buffer.buffer_offset();
  *t->mutable_extent() = buffer.buffer_extent();
}
void Read(v1::Batch* batch, const v1::Endpoint& buffer) {
  v1::Transfer* t = batch->add_transfers();
  *t->mutable_src() = buffer;
  *t->mutable_dst() = ViewOf(v1::ENDPOINT_DESTINATION_VIEW, 0);
  t->set_tensor("w");
  *t->mutable_offset() = buffer.buffer_offset();
  *t->mutable_extent() = buffer.buffer_extent();
}

class RelayBuffersTest : public ::testing::Test {
 protected:
  RelayBuffersTest()
      : tensors_({{"w", TensorShape{4, {64, 256}}}}),
        relays_(tensors_,
                [this](int64_t bytes, int32_t device) -> absl::StatusOr<std::shared_ptr<uint8_t>> {
                  allocated_.push_back({bytes, device});
                  return std::shared_ptr<uint8_t>(new uint8_t[bytes],
                                                  std::default_delete<uint8_t[]>());
                }) {}

  uint8_t* Base(const v1::Endpoint& buffer, int32_t device = -1) {
    const Dims offset(buffer.buffer_offset().begin(), buffer.buffer_offset().end());
    const Dims extent(buffer.buffer_extent().begin(), buffer.buffer_extent().end());
    absl::StatusOr<StridedRef> ref = relays_.Locate(buffer, "w", offset, extent, device);
    EXPECT_TRUE(ref.ok()) << ref.status();
    return ref.ok() ? ref->base : nullptr;
  }

  TensorTable tensors_;
  std::vector<std::pair<int64_t, int32_t>> allocated_;  // (bytes, device)
  RelayBuffers relays_;
};

TEST_F(RelayBuffersTest, ABufferReusesThePlaceOfOneReadForTheLastTimeInAnEarlierBatch) {
  // Batch 0 fills a (4 KiB) and b (8 KiB); batch 1 reads a for the last time and fills c
  // (4 KiB, beside them: a's place is free only after batch 1); batch 2 reads b and c and
  // fills d (4 KiB) into a's place; batch 3 reads d.
  const v1::Endpoint a = RelayBufferOf(1, 0, 0, 4), b = RelayBufferOf(1, 1, 4, 8),
                     c = RelayBufferOf(1, 2, 12, 4), d = RelayBufferOf(1, 3, 16, 4);
  v1::Plan plan;
  v1::Batch* b0 = plan.add_batches();
  Fill(b0, a);
  Fill(b0, b);
  v1::Batch* b1 = plan.add_batches();
  Read(b1, a);
  Fill(b1, c);
  v1::Batch* b2 = plan.add_batches();
  Read(b2, b);
  Read(b2, c);
  Fill(b2, d);
  Read(plan.add_batches(), d);
  // A buffer of rank 2 is another daemon's: not laid out here.
  Fill(b0, RelayBufferOf(2, 0, 32, 32));
  ASSERT_TRUE(relays_
                  .Prepare(
                      plan, [](int64_t rank) { return rank == 1; }, [](int64_t) { return -1; })
                  .ok());
  // One allocation, of what a, b and c take side by side (d fits in a's place).
  ASSERT_EQ(allocated_.size(), 1u);
  EXPECT_EQ(allocated_[0], std::make_pair(int64_t{16 << 10}, -1));
  EXPECT_EQ(relays_.block_bytes(), 16 << 10);

  uint8_t* const pa = Base(a);
  uint8_t* const pb = Base(b);
  EXPECT_EQ(pb - pa, 4 << 10);
  uint8_t* const pc = Base(c);  // batch 1 fills c while it reads a
  EXPECT_EQ(pc - pa, 12 << 10);
  relays_.ReadDone(a);  // after batch 1 ...
  relays_.ReadDone(b);
  relays_.ReadDone(c);
  EXPECT_EQ(Base(d), pa);  // ... and reused in batch 2
  relays_.ReadDone(d);
  EXPECT_EQ(relays_.peak_bytes(), 16 << 10);
  EXPECT_EQ(relays_.live_buffers(), 0);
  EXPECT_EQ(relays_.live_bytes(), 0);
}

TEST_F(RelayBuffersTest, BuffersOnTwoDevicesGetABlockEach) {
  v1::Plan plan;
  v1::Batch* b0 = plan.add_batches();
  Fill(b0, RelayBufferOf(1, 0, 0, 2));
  Fill(b0, RelayBufferOf(3, 0, 2, 1));
  Read(plan.add_batches(), RelayBufferOf(1, 0, 0, 2));
  Read(plan.mutable_batches(1), RelayBufferOf(3, 0, 2, 1));
  ASSERT_TRUE(
      relays_
          .Prepare(
              plan, [](int64_t) { return true; }, [](int64_t rank) { return rank == 1 ? 0 : 1; })
          .ok());
  ASSERT_EQ(allocated_.size(), 2u);
  EXPECT_EQ(allocated_[0], std::make_pair(int64_t{2 << 10}, 0));
  EXPECT_EQ(allocated_[1], std::make_pair(int64_t{1 << 10}, 1));
  // On the device the plan's rank lives on, not another.
  const v1::Endpoint on_one = RelayBufferOf(1, 0, 0, 2);
  absl::StatusOr<StridedRef> wrong = relays_.Locate(on_one, "w", {0, 0}, {2, 256}, 1);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(Base(on_one, 0), nullptr);
}

TEST_F(RelayBuffersTest, ABufferThePlanDoesNotNameHereIsRefusedByName) {
  v1::Plan plan;
  Fill(plan.add_batches(), RelayBufferOf(1, 0, 0, 2));
  ASSERT_TRUE(relays_
                  .Prepare(
                      plan, [](int64_t) { return true; }, [](int64_t) { return -1; })
                  .ok());
  absl::StatusOr<StridedRef> other =
      relays_.Locate(RelayBufferOf(1, 7, 0, 2), "w", {0, 0}, {2, 256}, -1);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("relay buffer 7 of source rank 1 (w)"), std::string::npos)
      << other.status();
  // A transfer's box outside the buffer's own box.
  absl::StatusOr<StridedRef> outside =
      relays_.Locate(RelayBufferOf(1, 0, 0, 2), "w", {1, 0}, {2, 256}, -1);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kOutOfRange) << outside.status();
}

}  // namespace
}  // namespace refit::transport
