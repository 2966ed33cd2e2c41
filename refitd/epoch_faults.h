// The points where a test may damage an epoch on purpose: a message from another daemon,
// received and not yet unpacked (what a link that changes a byte would do), to prove that
// the checksums catch it; and the preparation for a plan slice, made slow. Declared here and
// defined twice: refitd and every release binary link refitd:no_epoch_faults, which does nothing;
// only test binaries link refitd/testing:epoch_faults (testonly), so no fault can be switched on in
// a release.
#ifndef REFIT_REFITD_EPOCH_FAULTS_H_
#define REFIT_REFITD_EPOCH_FAULTS_H_

#include <cstdint>
#include <string>

namespace refit::daemon {

// Called by refitd on `node` with each host-memory message epoch `epoch_id` (moving
// `version`) received from another daemon, before its pieces are unpacked.
void OnMessageReceived(const std::string& node, const std::string& epoch_id, int64_t version,
                       uint8_t* message, int64_t bytes);

// Called by refitd on `node` as it starts preparing for a plan slice (a test may make the
// preparation slow, as creating a large outbox on a loaded host is).
void OnPrepare(const std::string& node);

}  // namespace refit::daemon

#endif  // REFIT_REFITD_EPOCH_FAULTS_H_
