#include "coordinator/replica_vetting.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/cluster.h"

namespace refit::daemon {
namespace {

using Declarations = std::map<int64_t, std::shared_ptr<const v1::RankRegistration>>;

// "F8_E4M3 [8, 4] (block_fp8, block 128 x 128)".
std::string Describe(const v1::TensorSpec& t) {
  std::string text = absl::StrCat(t.dtype(), " [", absl::StrJoin(t.shape(), ", "), "]");
  if (t.has_quantization()) {
    const v1::Quantization& q = t.quantization();
    absl::StrAppend(
        &text, " (", q.scheme().empty() ? "quantized" : q.scheme(),
        q.block().empty() ? "" : absl::StrCat(", block ", absl::StrJoin(q.block(), " x ")), ")");
  }
  return text;
}

// One replica's tensors as its ranks declare them, and hashes of what it declares: the
// tensors (its format) and the tensors with every rank's views (its kind: replicas of one
// kind plan alike).
struct Declared {
  std::map<std::string, const v1::TensorSpec*> tensors;
  size_t format = 0;
  size_t kind = 0;
};

// The replica's declarations merged, or why its ranks disagree or leave a tensor partly
// unheld.
absl::Status Merge(const DestinationReplicas& replicas, int64_t replica,
                   const Declarations& declarations, Declared* declared) {
  std::map<std::string, int64_t> first_rank;
  std::string views;  // every rank's views, in rank order
  for (int64_t rank : replicas.RanksOf({replica})) {
    auto it = declarations.find(rank);
    if (it == declarations.end()) continue;  // not complete after all: planned as it is
    const v1::RankRegistration& registration = *it->second;
    for (const v1::TensorSpec& t : registration.tensors()) {
      auto [at, inserted] = declared->tensors.emplace(t.name(), &t);
      if (inserted) {
        first_rank[t.name()] = rank;
      } else if (!SameTensor(*at->second, t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            replicas.Describe(replica), ": tensor ", t.name(), ": destination rank ", rank,
            " declares ", Describe(t), " where destination rank ", first_rank[t.name()],
            " of the same replica declares ", Describe(*at->second),
            "; the ranks of a replica must declare each tensor alike"));
      }
    }
    const v1::RankLayout& layout = registration.layout();
    absl::StrAppend(&views, "rank", layout.bucketed() ? "b" : "", layout.staged() ? "s" : "");
    for (const v1::ShardView& view : layout.views()) {
      absl::StrAppend(&views, "|", view.tensor(), ":", absl::StrJoin(view.offset(), ","), ":",
                      absl::StrJoin(view.extent(), ","));
    }
  }
  // Every tensor held whole: the distinct boxes of one replica's views are disjoint or
  // equal (replicated heads), so their volumes add up to what it holds.
  using BoxKey = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
  std::map<std::string, std::set<BoxKey>> boxes;
  for (int64_t rank : replicas.RanksOf({replica})) {
    auto it = declarations.find(rank);
    if (it == declarations.end()) continue;
    for (const v1::ShardView& view : it->second->layout().views()) {
      boxes[view.tensor()].insert({{view.offset().begin(), view.offset().end()},
                                   {view.extent().begin(), view.extent().end()}});
    }
  }
  std::string format;
  for (const auto& [name, t] : declared->tensors) {
    int64_t volume = 1;
    for (int64_t e : t->shape()) volume *= e;
    int64_t covered = 0;
    for (const BoxKey& box : boxes[name]) {
      int64_t v = 1;
      for (int64_t e : box.second) v *= e;
      covered += v;
    }
    if (covered < volume) {
      return absl::InvalidArgumentError(
          absl::StrCat(replicas.Describe(replica), " holds ", covered, " of the ", volume,
                       " elements of tensor ", name,
                       ": a replica must hold every tensor it declares whole (is the job's "
                       "destinationReplicas.ranksPerReplica ",
                       replicas.ranks_per_replica(), " smaller than a replica?)"));
    }
    absl::StrAppend(&format, name, "=", t->SerializeAsString(), ";");
  }
  declared->format = absl::HashOf(format);
  declared->kind = absl::HashOf(format, views);
  return absl::OkStatus();
}

// The first tensor that `here` declares otherwise than `there`, in words.
std::string FirstDifference(const Declared& there, const Declared& here) {
  auto a = there.tensors.begin();
  auto b = here.tensors.begin();
  while (a != there.tensors.end() || b != here.tensors.end()) {
    if (b == here.tensors.end() || (a != there.tensors.end() && a->first < b->first)) {
      return absl::StrCat("tensor ", a->first, " is declared there, not here");
    }
    if (a == there.tensors.end() || b->first < a->first) {
      return absl::StrCat("tensor ", b->first, " is declared here, not there");
    }
    if (!SameTensor(*a->second, *b->second)) {
      return absl::StrCat("tensor ", a->first, " is ", Describe(*a->second), " there and ",
                          Describe(*b->second), " here");
    }
    ++a;
    ++b;
  }
  return "they declare the same tensors";
}

}  // namespace

ReplicaVetting VetReplicas(const DestinationReplicas& replicas,
                           const std::vector<int64_t>& complete, const Declarations& declarations,
                           const PlanAlone& plan_alone) {
  ReplicaVetting vetting;
  std::map<int64_t, Declared> declared;
  std::map<size_t, std::vector<int64_t>> kinds;  // kind -> its replicas, ascending
  for (int64_t replica : complete) {
    Declared& d = declared[replica];
    if (absl::Status merged = Merge(replicas, replica, declarations, &d); !merged.ok()) {
      vetting.held[replica] = merged;
      declared.erase(replica);
      continue;
    }
    kinds[d.kind].push_back(replica);
  }
  // One kind: the group's plan says whether it fits the sources, for all alike.
  if (kinds.size() > 1) {
    for (const auto& [kind, members] : kinds) {
      const absl::Status planned = plan_alone(members.front());
      if (planned.code() != absl::StatusCode::kInvalidArgument) continue;
      for (int64_t replica : members) {
        vetting.held[replica] = absl::InvalidArgumentError(
            absl::StrCat(replicas.Describe(replica),
                         " cannot be written from the sources: ", planned.message()));
        declared.erase(replica);
      }
    }
  }
  // One format per group: the one most replicas declare (ties: the lowest replica's).
  std::map<size_t, std::vector<int64_t>> formats;
  for (const auto& [replica, d] : declared) formats[d.format].push_back(replica);
  const std::vector<int64_t>* chosen = nullptr;
  for (const auto& [format, members] : formats) {
    if (chosen == nullptr || members.size() > chosen->size() ||
        (members.size() == chosen->size() && members.front() < chosen->front())) {
      chosen = &members;
    }
  }
  for (const auto& [format, members] : formats) {
    if (&members == chosen) continue;
    for (int64_t replica : members) {
      vetting.held[replica] = absl::FailedPreconditionError(absl::StrCat(
          replicas.Describe(replica), " declares its tensors otherwise than ",
          DescribeReplicas(*chosen), ", whose format the group writes (",
          FirstDifference(declared[chosen->front()], declared[replica]),
          "): one refit group writes one format to all its replicas; serve this replica's "
          "format from a job of its own"));
    }
  }
  if (chosen != nullptr) vetting.fit = *chosen;
  return vetting;
}

}  // namespace refit::daemon
