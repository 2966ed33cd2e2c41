// Faults a test switches on for the refitd links of its own process (the test-only
// definition of refitd/epoch_faults.h): in the epoch of a version, a byte of a message from
// another daemon flipped before it is unpacked, so the coordinator must fail the epoch; a
// preparation for a plan slice made slow.
#ifndef REFIT_REFITD_TESTING_EPOCH_FAULTS_H_
#define REFIT_REFITD_TESTING_EPOCH_FAULTS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace refit::daemon::faults {

// In the epoch moving `version`, flips the first byte of the first message the refitd of
// `node` receives from another daemon (once).
void CorruptOnTheWay(const std::string& node, int64_t version);

// Makes every preparation for a plan slice by the refitd of `node` take `delay` longer
// (zero: no longer).
void SlowPreparation(const std::string& node, absl::Duration delay);

}  // namespace refit::daemon::faults

#endif  // REFIT_REFITD_TESTING_EPOCH_FAULTS_H_
