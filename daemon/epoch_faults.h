// The one point where a test may damage an epoch on purpose, between the data plane and the
// checksums, to prove that the checks catch it. Declared here and defined twice: refitd and
// every release binary link daemon:no_epoch_faults, which does nothing; only test binaries
// link daemon/testing:epoch_faults (testonly), so no fault can be switched on in a release.
#ifndef REFIT_DAEMON_EPOCH_FAULTS_H_
#define REFIT_DAEMON_EPOCH_FAULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/refit.pb.h"
#include "transport/buffer_map.h"

namespace refit::daemon {

// Called by refitd on `node` once epoch `epoch_id` (moving `version`) has written the
// buffers and before they are hashed.
void AfterDataPlane(const std::string& node, const std::string& epoch_id, int64_t version,
                    const std::vector<v1::RankRegistration>& registrations,
                    transport::BufferMap* buffers);

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_EPOCH_FAULTS_H_
