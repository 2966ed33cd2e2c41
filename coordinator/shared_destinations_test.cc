// Which destination ranks each daemon's slice lists as shared: those of the daemons of its
// own shared-memory domain (itself included), with the tensors they hold, the same list for
// every daemon of the domain; none for a daemon without a domain.
#include "coordinator/shared_destinations.h"

#include <set>

#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

std::set<int64_t> RanksOf(const v1::LayoutSpec& spec) {
  std::set<int64_t> ranks;
  for (const v1::RankLayout& r : spec.ranks()) ranks.insert(r.rank());
  return ranks;
}

TEST(SharedDestinationsTest, EachDaemonGetsTheRanksOfItsOwnDomain) {
  ClusterSnapshot snapshot;
  transport::RankPlacement where;
  // Daemons 0 and 1 share host A, daemon 2 is host B, daemon 3 said no domain.
  const char* domains[] = {"A", "A", "B", ""};
  for (int32_t d = 0; d < 4; ++d) {
    v1::DaemonPeer& peer = snapshot.daemons.emplace_back();
    peer.set_index(d);
    peer.set_shared_memory_domain(domains[d]);
  }
  for (const char* tensor : {"a", "b", "c"}) {
    v1::TensorSpec* spec = snapshot.destinations.add_tensors();
    spec->set_name(tensor);
    spec->set_dtype("BF16");
    spec->add_shape(4);
  }
  // Rank r on daemon r, holding tensor "a" (ranks 0, 2) or "b" (rank 1).
  for (int64_t r : {0, 1, 2}) {
    v1::RankLayout& layout = snapshot.shared_destinations[r];
    layout.set_rank(r);
    layout.add_views()->set_tensor(r == 1 ? "b" : "a");
    where.Place(v1::ROLE_DESTINATION, r, static_cast<int32_t>(r));
  }
  const v1::LayoutSpec first = SharedDestinationsFor(snapshot, where, 0);
  const v1::LayoutSpec second = SharedDestinationsFor(snapshot, where, 1);
  EXPECT_EQ(RanksOf(first), (std::set<int64_t>{0, 1}));
  EXPECT_EQ(first.SerializeAsString(), second.SerializeAsString()) << "one list per domain";
  ASSERT_EQ(first.tensors_size(), 2);  // "a" and "b", not "c"
  EXPECT_EQ(first.tensors(0).name(), "a");
  EXPECT_EQ(first.tensors(1).name(), "b");
  EXPECT_EQ(RanksOf(SharedDestinationsFor(snapshot, where, 2)), (std::set<int64_t>{2}));
  EXPECT_EQ(SharedDestinationsFor(snapshot, where, 3).ranks_size(), 0);
}

}  // namespace
}  // namespace refit::daemon
