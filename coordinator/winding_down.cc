#include "coordinator/winding_down.h"

namespace refit::daemon {

void WindingDown::Start(const std::string& epoch_id, const std::set<int32_t>& awaiting,
                        const Sessions& sessions) {
  epoch_id_ = epoch_id;
  daemons_.clear();
  for (int32_t daemon : awaiting) {
    auto session = sessions.find(daemon);
    if (session != sessions.end()) daemons_[daemon] = session->second;
  }
}

void WindingDown::OnDone(int32_t daemon, const std::string& epoch_id) {
  if (epoch_id == epoch_id_) daemons_.erase(daemon);
}

void WindingDown::OnDaemonLost(int32_t daemon) { daemons_.erase(daemon); }

bool WindingDown::Over(const Sessions& sessions) const {
  for (const auto& [daemon, session] : daemons_) {
    auto now = sessions.find(daemon);
    if (now != sessions.end() && now->second == session.lock()) return false;
  }
  return true;
}

}  // namespace refit::daemon
