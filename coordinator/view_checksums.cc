#include "coordinator/view_checksums.h"

#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace refit::daemon {
namespace {

struct ViewRef {
  v1::Role role;
  int64_t rank;
  int32_t view;
};

// The box a view holds, as a printable key.
std::string BoxOf(const v1::ShardView& view) {
  return absl::StrCat(view.tensor(), " [", absl::StrJoin(view.offset(), ","), "] + [",
                      absl::StrJoin(view.extent(), ","), "]");
}

std::string Describe(const ViewRef& v) {
  return absl::StrCat(v.role == v1::ROLE_SOURCE ? "source" : "destination", " rank ", v.rank,
                      " view ", v.view);
}

}  // namespace

absl::StatusOr<int64_t> CompareViewChecksums(const v1::LayoutSpec& sources,
                                             const v1::LayoutSpec& destinations,
                                             const std::vector<v1::ViewChecksum>& checksums) {
  // (role, rank, view) -> the box it holds, as a printable key.
  std::map<std::tuple<int, int64_t, int32_t>, std::string> box_of;
  for (auto [spec, role] :
       {std::pair{&sources, v1::ROLE_SOURCE}, std::pair{&destinations, v1::ROLE_DESTINATION}}) {
    for (const v1::RankLayout& r : spec->ranks()) {
      for (int v = 0; v < r.views_size(); ++v) {
        box_of[{role, r.rank(), v}] = BoxOf(r.views(v));
      }
    }
  }
  struct Group {
    std::map<uint64_t, std::vector<ViewRef>> by_hash;
    uint64_t source_hash = 0;
    bool has_source = false;
    int64_t views = 0;
  };
  std::map<std::string, Group> groups;
  for (const v1::ViewChecksum& c : checksums) {
    auto box = box_of.find({c.role(), c.rank(), c.view()});
    if (box == box_of.end()) continue;  // a rank that left: nothing to compare against
    Group& group = groups[box->second];
    group.by_hash[c.xxh64()].push_back(ViewRef{c.role(), c.rank(), c.view()});
    ++group.views;
    if (c.role() == v1::ROLE_SOURCE && !group.has_source) {
      group.has_source = true;
      group.source_hash = c.xxh64();
    }
  }
  int64_t compared = 0;
  for (const auto& [box, group] : groups) {
    if (group.views < 2) continue;
    compared += group.views;
    if (group.by_hash.size() == 1) continue;
    // The reference: what the (first) source holds, else what most copies hold.
    uint64_t reference = group.source_hash;
    if (!group.has_source) {
      size_t most = 0;
      for (const auto& [hash, views] : group.by_hash) {
        if (views.size() > most) most = views.size(), reference = hash;
      }
    }
    std::vector<std::string> wrong;
    for (const auto& [hash, views] : group.by_hash) {
      if (hash == reference) continue;
      for (const ViewRef& v : views)
        wrong.push_back(absl::StrFormat("%s (%016x)", Describe(v), hash));
    }
    return absl::DataLossError(absl::StrCat("checksum mismatch on ", box, ": ",
                                            absl::StrJoin(wrong, ", "), " differ from ",
                                            group.has_source ? "the source's" : "the other copies'",
                                            absl::StrFormat(" %016x", reference)));
  }
  return compared;
}

ViewKeySet ComparedViews(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                         bool destinations_hashed) {
  std::map<std::string, std::vector<std::tuple<int, int64_t, int32_t>>> holders;
  for (auto [spec, role] :
       {std::pair{&sources, v1::ROLE_SOURCE}, std::pair{&destinations, v1::ROLE_DESTINATION}}) {
    if (role == v1::ROLE_DESTINATION && !destinations_hashed) continue;
    for (const v1::RankLayout& r : spec->ranks()) {
      for (int v = 0; v < r.views_size(); ++v) {
        holders[BoxOf(r.views(v))].emplace_back(role, r.rank(), v);
      }
    }
  }
  ViewKeySet compared;
  for (const auto& [box, views] : holders) {
    if (views.size() > 1) compared.insert(views.begin(), views.end());
  }
  return compared;
}

}  // namespace refit::daemon
