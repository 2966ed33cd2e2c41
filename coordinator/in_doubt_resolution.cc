#include "coordinator/in_doubt_resolution.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::daemon {

InDoubtResolution ResolveInDoubt(const v1::InDoubtEpoch& epoch, std::optional<bool> decided_here,
                                 const std::vector<NodeWord>& heard) {
  if (decided_here.has_value()) {
    if (*decided_here) return {InDoubtResolution::kCommit, "the coordinator committed it"};
    return {InDoubtResolution::kAbort, "the coordinator aborted it"};
  }
  std::set<std::string> nodes_heard;
  for (const NodeWord& word : heard) {
    if (word.committed_epoch_id == epoch.epoch_id()) {
      return {InDoubtResolution::kCommit, absl::StrCat("refitd on ", word.node, " committed it")};
    }
    nodes_heard.insert(word.node);
  }
  std::vector<std::string> unheard;
  for (const std::string& node : epoch.destination_nodes()) {
    if (!nodes_heard.count(node)) unheard.push_back(node);
  }
  if (!unheard.empty()) {
    return {InDoubtResolution::kUndecided,
            absl::StrCat("waiting for refitd on ", absl::StrJoin(unheard, ", "),
                         " to say whether it committed it")};
  }
  return {InDoubtResolution::kAbort,
          absl::StrCat("the coordinator restarted before its outcome reached every daemon, and "
                       "none of its destination nodes (",
                       absl::StrJoin(epoch.destination_nodes(), ", "), ") committed it")};
}

}  // namespace refit::daemon
