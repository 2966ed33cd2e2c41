// refitd's end of the host data plane: its UCX worker, the endpoints to the peer daemons a
// plan slice exchanges pieces with (kept across epochs, replaced when broken or when the
// peer's address changed), and the worker's replacement after an epoch left operations
// that would not end or force-closed an endpoint. Used by the epoch thread only.
#ifndef REFIT_REFITD_DATA_PLANE_ENDPOINT_H_
#define REFIT_REFITD_DATA_PLANE_ENDPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/interrupt.h"
#include "transport/ucx_worker.h"

namespace refit::daemon {

class DataPlaneEndpoint {
 public:
  // `node` names the worker in logs; `interrupt` ends its waits (the running epoch's
  // abort). `on_new_address` runs with the address of every worker made (the control
  // session must say it in its hello).
  DataPlaneEndpoint(std::string node, const transport::Interrupt* interrupt,
                    std::function<void(const std::string& address)> on_new_address)
      : node_(std::move(node)), interrupt_(interrupt), on_new_address_(std::move(on_new_address)) {}
  ~DataPlaneEndpoint() { Drop(); }

  // Makes the worker if there is none; logs the first failure of a run of them. Returns
  // whether there is a worker now.
  bool EnsureWorker();
  transport::UcxWorker* worker() const { return worker_.get(); }
  // The worker's address ("" while there is none).
  const std::string& address() const { return address_; }

  // Endpoints to the daemons of `slice` with an index in `exchanged_with`, indexed by
  // daemon (null for this daemon and the others). Needs a worker.
  absl::StatusOr<std::vector<transport::UcxEndpoint*>> PeersFor(
      const v1::PlanSlice& slice, const std::set<int32_t>& exchanged_with);

  // After an epoch: if it left UCX operations that would not end, or force-closed an
  // endpoint on a send that would not end (see UcxWorker::endpoints_force_closed), the
  // endpoints and the worker go (destroying them ends those operations, so no late data
  // lands in memory that is reused, and no stale UCX connection state survives);
  // EnsureWorker makes a new one, whose new address makes every peer connect anew.
  // Returns whether it dropped them.
  bool DropIfUnsound(const std::string& epoch_id);
  // Closes the endpoints, then the worker.
  void Drop();

 private:
  const std::string node_;
  const transport::Interrupt* interrupt_;
  std::function<void(const std::string& address)> on_new_address_;
  std::unique_ptr<transport::UcxWorker> worker_;
  std::string address_;
  bool failing_ = false;  // the last EnsureWorker failed
  // Per peer daemon: the address its endpoint was made for, and the endpoint.
  std::map<int32_t, std::pair<std::string, std::unique_ptr<transport::UcxEndpoint>>> peers_;
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_DATA_PLANE_ENDPOINT_H_
