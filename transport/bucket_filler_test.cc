#include "transport/bucket_filler.h"

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

// A strided [4, 6, 10] box of a larger tensor, through a bucket that holds 100 floats:
// the parts delivered rebuild the box exactly, the bucket is never overfilled, and the
// epoch's last delivery comes once, at Finish.
TEST(BucketFillerTest, PiecesLargerThanTheBucketArriveWholeInParts) {
  const Dims global{8, 6, 16};
  std::vector<float> tensor(Volume(global));
  std::iota(tensor.begin(), tensor.end(), 1.0f);
  const Dims offset{2, 0, 3}, extent{4, 6, 10};
  const Dims strides{6 * 16, 16, 1};
  const StridedRef from{reinterpret_cast<uint8_t*>(tensor.data() + 2 * 96 + 3), strides, -1};

  const int64_t capacity = 100 * 4;
  std::vector<uint8_t> bucket(capacity);
  std::vector<float> rebuilt(Volume(global), 0.0f);
  int deliveries = 0, lasts = 0;
  BucketFiller filler(bucket.data(), capacity,
                      [&](const std::vector<BucketPart>& parts, bool last) {
                        ++deliveries;
                        lasts += last;
                        for (const BucketPart& part : parts) {
                          EXPECT_EQ(part.tensor, "w");
                          EXPECT_EQ(part.byte_offset % 64, 0);
                          EXPECT_LE(part.byte_offset + Volume(part.extent) * 4, capacity);
                          const float* data =
                              reinterpret_cast<const float*>(bucket.data() + part.byte_offset);
                          int64_t i = 0;
                          for (int64_t a = 0; a < part.extent[0]; ++a)
                            for (int64_t b = 0; b < part.extent[1]; ++b)
                              for (int64_t c = 0; c < part.extent[2]; ++c) {
                                const Dims at{part.offset[0] + a, part.offset[1] + b,
                                              part.offset[2] + c};
                                rebuilt[Linear(at, global)] = data[i++];
                              }
                        }
                        return absl::OkStatus();
                      });
  ASSERT_TRUE(filler.Write("w", offset, extent, 4, from).ok());
  EXPECT_EQ(lasts, 0);
  ASSERT_TRUE(filler.Finish().ok());
  EXPECT_EQ(lasts, 1);
  EXPECT_GE(deliveries, 3);  // 240 floats through a bucket of 100
  EXPECT_EQ(filler.bytes_written(), Volume(extent) * 4);
  for (int64_t a = 0; a < global[0]; ++a)
    for (int64_t b = 0; b < global[1]; ++b)
      for (int64_t c = 0; c < global[2]; ++c) {
        const bool inside = a >= 2 && a < 6 && c >= 3 && c < 13;
        const int64_t i = Linear({a, b, c}, global);
        EXPECT_EQ(rebuilt[i], inside ? tensor[i] : 0.0f) << a << "," << b << "," << c;
      }
}

TEST(BucketFillerTest, AFailedDeliveryStopsTheWrite) {
  std::vector<float> data(64, 1.0f);
  std::vector<uint8_t> bucket(64);
  BucketFiller filler(bucket.data(), 64, [](const std::vector<BucketPart>&, bool) {
    return absl::AbortedError("the engine could not take it");
  });
  const StridedRef from{reinterpret_cast<uint8_t*>(data.data()), {1}, -1};
  const absl::Status status = filler.Write("w", {0}, {64}, 4, from);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_NE(status.message().find("could not take it"), std::string::npos);
}

}  // namespace
}  // namespace refit::transport
