// refitd's half of the engines' pauses (RankLayout.pauses_for_writes): the stream each such
// destination rank's process holds open (LocalDaemon.WatchWrites), the notices sent down it
// (before an epoch writes the rank's buffers, after the commit or the abort), and the wait
// for the engines' Paused before the coordinator launches the epoch.
#ifndef REFIT_REFITD_ENGINE_PAUSES_H_
#define REFIT_REFITD_ENGINE_PAUSES_H_

#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

class EnginePauses {
 public:
  // WatchWrites: attaches the stream of destination rank `rank` (registered under
  // `session`), says so (ATTACHED), then sends (`send`) each notice, until `ended()`
  // (checked every 100 ms: the process went away, or the rank left) or `send` fails. A
  // newer attachment for the rank replaces this one.
  void Serve(int64_t rank, const std::string& session,
             const std::function<bool(const v1::WriteNotice&)>& send,
             const std::function<bool()>& ended) ABSL_LOCKS_EXCLUDED(mu_);
  // Paused: the engine of `rank` stopped reading its weights for `pause_id`.
  absl::Status Paused(int64_t rank, const std::string& session, const std::string& pause_id)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Tells each rank of `request` BEFORE_WRITE and returns those whose engines paused by
  // `deadline`. A rank still paused from an earlier request (an epoch that runs again)
  // counts at once; one with no stream attached does not pause.
  std::vector<int64_t> Pause(const v1::PauseRanks& request, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the pause of those of `ranks` that were asked to pause, telling them `kind`
  // (COMMITTED, ABORTED, SKIPPED) for `version`.
  void Resume(const std::vector<int64_t>& ranks, v1::WriteNotice::Kind kind, int64_t version,
              const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Resume for every rank asked to pause for `version` or an older one (an epoch's commit
  // or abort ends the pauses made for it, not those of a newer epoch; kAll: every pause).
  static constexpr int64_t kAll = INT64_MAX;
  void ResumeUpTo(v1::WriteNotice::Kind kind, int64_t version, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Channel {
    std::string session;
    uint64_t attachment = 0;  // which Serve call owns it
    std::deque<v1::WriteNotice> outgoing;
    std::string asked;     // the pause it was told of, until resumed ("": none)
    int64_t version = -1;  // what that pause was for
    bool paused = false;
  };
  void ResumeLocked(Channel* channel, v1::WriteNotice::Kind kind, int64_t version,
                    const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<int64_t, Channel> channels_ ABSL_GUARDED_BY(mu_);
  uint64_t attachments_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_ENGINE_PAUSES_H_
