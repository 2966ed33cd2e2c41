// How the coordinator settles an epoch that a daemon finished but never heard the outcome
// of (the coordinator, or the daemon's stream, went away between the daemon's report and
// the commit or abort). Commit is all or nothing across the destination ranks: an epoch is
// committed for a daemon in doubt once anyone committed it, and aborted only once nobody
// can have (the coordinator that ran it decided so, or every node that held its
// destination ranks has said hello since and none of them committed it).
#ifndef REFIT_COORDINATOR_IN_DOUBT_RESOLUTION_H_
#define REFIT_COORDINATOR_IN_DOUBT_RESOLUTION_H_

#include <optional>
#include <string>
#include <vector>

#include "proto/refit.pb.h"

namespace refit::daemon {

// What the coordinator heard from a node in this life (its latest hello).
struct NodeWord {
  std::string node;
  std::string committed_epoch_id;  // "" when none
};

struct InDoubtResolution {
  enum Outcome { kCommit, kAbort, kUndecided };
  Outcome outcome = kUndecided;
  std::string why;  // for the log and the abort reason
};

// `decided_here`: what this coordinator decided for the epoch (committed or not), if it ran
// it. `heard`: every node that said hello to this coordinator.
InDoubtResolution ResolveInDoubt(const v1::InDoubtEpoch& epoch, std::optional<bool> decided_here,
                                 const std::vector<NodeWord>& heard);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_IN_DOUBT_RESOLUTION_H_
