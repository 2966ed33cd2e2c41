#include "refitd/data_plane_endpoint.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {

bool DataPlaneEndpoint::EnsureWorker() {
  if (worker_ != nullptr) return true;
  absl::StatusOr<std::unique_ptr<transport::UcxWorker>> worker =
      transport::UcxWorker::Create(node_);
  if (!worker.ok()) {
    if (!failing_) {
      spdlog::error("refitd {}: no data-plane worker yet ({}); trying again every 0.5 s", node_,
                    worker.status().ToString());
    }
    failing_ = true;
    return false;
  }
  failing_ = false;
  (*worker)->SetInterrupt(interrupt_);
  worker_ = std::move(*worker);
  address_ = worker_->address();
  if (on_new_address_) on_new_address_(address_);
  return true;
}

absl::StatusOr<std::vector<transport::UcxEndpoint*>> DataPlaneEndpoint::PeersFor(
    const v1::PlanSlice& slice, const std::set<int32_t>& exchanged_with) {
  if (worker_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("refitd on ", node_, " has no data-plane worker"));
  }
  // Connections that broke while the worker sat idle between epochs say so now, and are
  // replaced below rather than failing the epoch at its first send.
  worker_->ProgressPending();
  std::vector<transport::UcxEndpoint*> peers;
  for (const v1::DaemonPeer& peer : slice.daemons()) {
    if (peer.index() < 0 || peer.index() > 1 << 20) {
      return absl::InvalidArgumentError(absl::StrCat("bad daemon index ", peer.index()));
    }
    if (peers.size() <= static_cast<size_t>(peer.index())) peers.resize(peer.index() + 1, nullptr);
    if (peer.index() == slice.daemon_index() || !exchanged_with.count(peer.index())) continue;
    auto& [address, endpoint] = peers_[peer.index()];
    if (endpoint == nullptr || endpoint->broken() || address != peer.data_plane_address()) {
      absl::StatusOr<std::unique_ptr<transport::UcxEndpoint>> connected =
          worker_->Connect(peer.data_plane_address());
      if (!connected.ok()) return connected.status();
      address = peer.data_plane_address();
      endpoint = std::move(*connected);
    }
    peers[peer.index()] = endpoint.get();
  }
  return peers;
}

bool DataPlaneEndpoint::DropIfUnsound(const std::string& epoch_id) {
  if (worker_ == nullptr) return false;
  const int64_t left =
      worker_->abandoned_operations() + static_cast<int64_t>(worker_->lingering_receives());
  const int64_t force_closed = worker_->endpoints_force_closed();
  if (left == 0 && force_closed == 0) return false;
  if (left > 0) {
    spdlog::warn(
        "refitd {}: epoch {} left {} UCX operations that would not end; dropping the "
        "data-plane worker so they cannot touch memory later",
        node_, epoch_id, left);
  } else {
    spdlog::warn(
        "refitd {}: epoch {} force-closed {} UCX endpoints on a stalled send; replacing the "
        "data-plane worker (UCX keeps state for them that a later connection trips over)",
        node_, epoch_id, force_closed);
  }
  Drop();
  return true;
}

void DataPlaneEndpoint::Drop() {
  peers_.clear();  // endpoints before their worker
  worker_.reset();
  address_.clear();
}

}  // namespace refit::daemon
