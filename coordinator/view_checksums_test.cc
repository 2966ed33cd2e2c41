// View checksums over real shared memory: replicas and source/destination copies of one
// box agree after a correct copy, and one flipped byte in any copy is named.
#include "coordinator/view_checksums.h"

#include <map>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "transport/testing/backed_layouts.h"
#include "transport/view_hashing.h"

namespace refit::daemon {
namespace {

using transport::ChecksumViews;
using transport::SourceReplicaShare;
using transport::ViewChecksumBytes;

std::vector<v1::RankRegistration> Registrations(const v1::LayoutSpec& spec, v1::Role role) {
  std::vector<v1::RankRegistration> out;
  for (const v1::RankLayout& r : spec.ranks()) {
    v1::RankRegistration& registration = out.emplace_back();
    registration.set_role(role);
    *registration.mutable_layout() = r;
    *registration.mutable_tensors() = spec.tensors();
  }
  return out;
}

class ViewChecksumsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two source ranks split rows; two destination replicas each hold all of it, and one
    // destination view repeats a source's box exactly.
    refit::testing::LayoutBuilder src, dst;
    src.Tensor("w", {8, 16}).Rank(0, "a", 0).View(0, "w", {0, 0}, {4, 16});
    src.Rank(1, "a", 1).View(1, "w", {4, 0}, {4, 16});
    dst.Tensor("w", {8, 16}).Rank(0, "b", 0).Replicated("w", {0});
    dst.Rank(1, "b", 1).Replicated("w", {1});
    dst.Rank(2, "b", 2).View(2, "w", {4, 0}, {4, 16});
    sources_ = backed_.Back(src.spec(), "source");
    destinations_ = backed_.Back(dst.spec(), "destination");
    buffers_ = std::make_unique<transport::BufferMap>(transport::testing::TensorsOf(sources_));
    for (const v1::RankLayout& r : sources_.ranks()) {
      ASSERT_TRUE(buffers_->AddRank(v1::ROLE_SOURCE, r).ok());
      transport::testing::FillViews(buffers_.get(), v1::ROLE_SOURCE, r);
    }
    for (const v1::RankLayout& r : destinations_.ranks()) {
      ASSERT_TRUE(buffers_->AddRank(v1::ROLE_DESTINATION, r).ok());
      // What a correct epoch leaves: the same values the sources hold.
      transport::testing::FillViews(buffers_.get(), v1::ROLE_DESTINATION, r);
    }
  }

  absl::StatusOr<int64_t> Compare() {
    std::vector<v1::RankRegistration> all = Registrations(sources_, v1::ROLE_SOURCE);
    for (const v1::RankRegistration& r : Registrations(destinations_, v1::ROLE_DESTINATION)) {
      all.push_back(r);
    }
    absl::StatusOr<std::vector<v1::ViewChecksum>> checksums = ChecksumViews(all, *buffers_);
    if (!checksums.ok()) return checksums.status();
    EXPECT_EQ(checksums->size(), 5u);
    return CompareViewChecksums(sources_, destinations_, *checksums);
  }

  // Flips one byte of the first element of a rank's first view.
  void Corrupt(v1::Role role, const v1::RankLayout& rank) {
    const v1::ShardView& view = rank.views(0);
    auto memory =
        buffers_->LocateForWrite(role, rank.rank(), 0, view.tensor(),
                                 transport::Dims(view.offset().begin(), view.offset().end()),
                                 transport::Dims(view.extent().begin(), view.extent().end()));
    ASSERT_TRUE(memory.ok());
    memory->base[0] ^= 1;
  }

  transport::testing::BackedLayouts backed_;
  v1::LayoutSpec sources_, destinations_;
  std::unique_ptr<transport::BufferMap> buffers_;
};

TEST_F(ViewChecksumsTest, CopiesOfOneBoxAgree) {
  absl::StatusOr<int64_t> compared = Compare();
  ASSERT_TRUE(compared.ok()) << compared.status();
  // The two full replicas compare with each other; source rank 1 with destination rank 2.
  EXPECT_EQ(*compared, 4);
}

TEST_F(ViewChecksumsTest, ADestinationThatDiffersFromItsSourceIsNamed) {
  Corrupt(v1::ROLE_DESTINATION, destinations_.ranks(2));
  absl::StatusOr<int64_t> compared = Compare();
  EXPECT_EQ(compared.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(compared.status().message().find("checksum mismatch on w [4,0] + [4,16]: "
                                             "destination rank 2 view 0"),
            std::string::npos)
      << compared.status();
  EXPECT_NE(compared.status().message().find("differ from the source's"), std::string::npos);
}

TEST_F(ViewChecksumsTest, AReplicaThatDiffersIsNamed) {
  Corrupt(v1::ROLE_DESTINATION, destinations_.ranks(1));
  absl::StatusOr<int64_t> compared = Compare();
  EXPECT_EQ(compared.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(compared.status().message().find("on w [0,0] + [8,16]"), std::string::npos)
      << compared.status();
}

// Only views another hashed view shares are worth hashing: the two full replicas, and source
// rank 1 with destination rank 2; source rank 0's box is held by no other view. Without
// destination hashes (unordered plans) no source view here has a twin.
TEST_F(ViewChecksumsTest, OnlyViewsWithATwinAreCompared) {
  const ViewKeySet compared = ComparedViews(sources_, destinations_, /*destinations_hashed=*/true);
  EXPECT_EQ(compared, (ViewKeySet{{v1::ROLE_SOURCE, 1, 0},
                                  {v1::ROLE_DESTINATION, 0, 0},
                                  {v1::ROLE_DESTINATION, 1, 0},
                                  {v1::ROLE_DESTINATION, 2, 0}}));
  EXPECT_TRUE(ComparedViews(sources_, destinations_, /*destinations_hashed=*/false).empty());
  // Hashing only those compares as many views as hashing all, and still names a bad copy.
  std::vector<v1::RankRegistration> all = Registrations(sources_, v1::ROLE_SOURCE);
  for (const v1::RankRegistration& r : Registrations(destinations_, v1::ROLE_DESTINATION)) {
    all.push_back(r);
  }
  auto selected = ChecksumViews(all, *buffers_, &compared);
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_EQ(selected->size(), 4u);
  EXPECT_EQ(*CompareViewChecksums(sources_, destinations_, *selected), 4);
  Corrupt(v1::ROLE_DESTINATION, destinations_.ranks(2));
  selected = ChecksumViews(all, *buffers_, &compared);
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_EQ(CompareViewChecksums(sources_, destinations_, *selected).status().code(),
            absl::StatusCode::kDataLoss);
}

// Source replicas compared a share at a time: over `every` consecutive epochs each source
// view is hashed exactly once, all of a tensor's views in the same epoch; `only` still
// applies, and `every` 1 hashes all of them each epoch.
TEST_F(ViewChecksumsTest, EachSourceViewIsInExactlyOneShareOfItsCheckEpochs) {
  refit::testing::LayoutBuilder src;
  src.Rank(0, "a", 0).Rank(1, "b", 0);
  for (int i = 0; i < 12; ++i) {
    const std::string name = "t" + std::to_string(i);
    src.Tensor(name, {4, 4}).Replicated(name, {0, 1});
  }
  const std::vector<v1::RankRegistration> sources = Registrations(src.spec(), v1::ROLE_SOURCE);
  constexpr uint32_t kEvery = 4;
  std::map<std::tuple<int, int64_t, int32_t>, int> times;
  int shares_with_views = 0;
  for (uint32_t epoch = 9; epoch < 9 + kEvery; ++epoch) {
    const ViewKeySet share = SourceReplicaShare(sources, nullptr, epoch, kEvery);
    shares_with_views += !share.empty();
    for (const auto& key : share) {
      ++times[key];
      // The replica of the same tensor (same view index on the other rank) is in too.
      EXPECT_EQ(share.count({v1::ROLE_SOURCE, 1 - std::get<1>(key), std::get<2>(key)}), 1u);
    }
  }
  EXPECT_EQ(times.size(), 24u);
  for (const auto& [key, count] : times) EXPECT_EQ(count, 1);
  EXPECT_GT(shares_with_views, 1);  // spread over the epochs, not all in one
  EXPECT_EQ(SourceReplicaShare(sources, nullptr, 9, 1).size(), 24u);
  const ViewKeySet only{{v1::ROLE_SOURCE, 0, 3}};
  size_t with_only = 0;
  for (uint32_t epoch = 0; epoch < kEvery; ++epoch) {
    with_only += SourceReplicaShare(sources, &only, epoch, kEvery).size();
  }
  EXPECT_EQ(with_only, 1u);
}

}  // namespace
}  // namespace refit::daemon
