#include "transport/bucket_filler.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace refit::transport {
namespace {

int64_t Volume(const Dims& extent) {
  int64_t v = 1;
  for (int64_t e : extent) v *= e;
  return v;
}

// Row-major linear index of a coordinate inside `extent`.
int64_t Linear(const Dims& coord, const Dims& extent) {
  int64_t at = 0;
  for (size_t d = 0; d < extent.size(); ++d) at = at * extent[d] + coord[d];
  return at;
}

TEST(SplitRowMajorTest, PartsFitAndFollowEachOtherInRowMajorOrder) {
  for (const int64_t max_bytes : {4, 12, 40, 64, 100, 4 * 120, 4 * 1000}) {
    const Dims extent{3, 5, 8};
    absl::StatusOr<std::vector<std::pair<Dims, Dims>>> parts = SplitRowMajor(extent, 4, max_bytes);
    ASSERT_TRUE(parts.ok()) << parts.status();
    int64_t next = 0;  // the row-major index the next part must start at
    for (const auto& [offset, part] : *parts) {
      EXPECT_LE(Volume(part) * 4, max_bytes);
      EXPECT_EQ(Linear(offset, extent), next) << "max " << max_bytes;
      // A part is contiguous in the box's row-major order: only its first cut dim and the
      // dims after it span more than one index, and those span the whole box.
      next += Volume(part);
    }
    EXPECT_EQ(next, Volume(extent)) << "max " << max_bytes;
  }
  EXPECT_FALSE(SplitRowMajor({4}, 8, 4).ok());
  EXPECT_TRUE(SplitRowMajor({0, 4}, 4, 4)->empty());
}

// A strided [4, 6, 10] box of a larger tensor, through a bucket of 2 x 50 floats: the
// parts handed over rebuild the box exactly, each hand-over lies in one half, a half is
// refilled only after the process took what it held, and the last hand-over comes once,
// at Finish, which waits for everything to be taken.
TEST(BucketFillerTest, PiecesLargerThanTheBucketArriveWholeInParts) {
  const Dims global{8, 6, 16};
  std::vector<float> tensor(Volume(global));
  std::iota(tensor.begin(), tensor.end(), 1.0f);
  const Dims offset{2, 0, 3}, extent{4, 6, 10};
  const Dims strides{6 * 16, 16, 1};
  const StridedRef from{reinterpret_cast<uint8_t*>(tensor.data() + 2 * 96 + 3), strides, -1};

  const int64_t capacity = 2 * 256;  // halves of 64 floats
  std::vector<uint8_t> bucket(capacity);
  std::vector<float> rebuilt(Volume(global), 0.0f);
  int64_t sent = 0, lasts = 0, taken = 0;
  std::vector<int64_t> awaited;
  auto send = [&](const std::vector<BucketPart>& parts, bool last) -> absl::StatusOr<int64_t> {
    ++sent;
    lasts += last;
    const int64_t half = parts.empty() ? 0 : parts.front().byte_offset / 256;
    for (const BucketPart& part : parts) {
      EXPECT_EQ(part.tensor, "w");
      EXPECT_EQ(part.byte_offset % 64, 0);
      EXPECT_GE(part.byte_offset, half * 256);
      EXPECT_LE(part.byte_offset + Volume(part.extent) * 4, (half + 1) * 256);
      const float* data = reinterpret_cast<const float*>(bucket.data() + part.byte_offset);
      int64_t i = 0;
      for (int64_t a = 0; a < part.extent[0]; ++a)
        for (int64_t b = 0; b < part.extent[1]; ++b)
          for (int64_t c = 0; c < part.extent[2]; ++c) {
            const Dims at{part.offset[0] + a, part.offset[1] + b, part.offset[2] + c};
            rebuilt[Linear(at, global)] = data[i++];
          }
    }
    return sent;
  };
  auto await_taken = [&](int64_t sequence) {
    awaited.push_back(sequence);
    taken = std::max(taken, sequence);
    return absl::OkStatus();
  };
  BucketFiller filler(bucket.data(), capacity, send, await_taken);
  ASSERT_TRUE(filler.Write("w", offset, extent, 4, from).ok());
  EXPECT_EQ(lasts, 0);
  // Each refill of a half waited for the hand-over before the one just made.
  for (size_t i = 0; i < awaited.size(); ++i) EXPECT_EQ(awaited[i], static_cast<int64_t>(i) + 1);
  EXPECT_EQ(static_cast<int64_t>(awaited.size()), sent - 1);
  ASSERT_TRUE(filler.Finish().ok());
  EXPECT_EQ(lasts, 1);
  EXPECT_EQ(taken, sent);
  EXPECT_GE(sent, 4);  // 240 floats through halves of 64
  EXPECT_EQ(filler.bytes_written(), Volume(extent) * 4);
  for (int64_t a = 0; a < global[0]; ++a)
    for (int64_t b = 0; b < global[1]; ++b)
      for (int64_t c = 0; c < global[2]; ++c) {
        const bool inside = a >= 2 && a < 6 && c >= 3 && c < 13;
        const int64_t i = Linear({a, b, c}, global);
        EXPECT_EQ(rebuilt[i], inside ? tensor[i] : 0.0f) << a << "," << b << "," << c;
      }
}

TEST(BucketFillerTest, AHalfTheProcessCouldNotTakeStopsTheWrite) {
  std::vector<float> data(64, 1.0f);
  std::vector<uint8_t> bucket(128);
  int64_t sent = 0;
  BucketFiller filler(
      bucket.data(), 128,
      [&](const std::vector<BucketPart>&, bool) -> absl::StatusOr<int64_t> { return ++sent; },
      [](int64_t) { return absl::AbortedError("the engine could not take it"); });
  const StridedRef from{reinterpret_cast<uint8_t*>(data.data()), {1}, -1};
  const absl::Status status = filler.Write("w", {0}, {64}, 4, from);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_NE(status.message().find("could not take it"), std::string::npos);
  EXPECT_EQ(sent, 2);  // both halves handed over; refilling the first needed it back
}

}  // namespace
}  // namespace refit::transport
