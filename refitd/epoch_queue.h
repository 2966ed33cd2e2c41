// refitd's epoch thread: runs the epochs the control stream hands it, one at a time, so the
// stream keeps reading (and can abort one) while an epoch runs. Between epochs it calls
// `prepare` (refitd remakes a lost UCX worker, maps same-host peers' ranks and prepares for
// a new plan slice there) and,
// while that fails, tries again every 500 ms; Nudge has it called again. Every submitted epoch
// runs, even one interrupted before it started: it must still be reported.
//
// Threading: Submit, Finish and Nudge come from the coordinator link's thread; `prepare`
// and `run` are called on the queue's own thread only, so what they touch needs no lock.
#ifndef REFIT_REFITD_EPOCH_QUEUE_H_
#define REFIT_REFITD_EPOCH_QUEUE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/refit.pb.h"
#include "transport/interrupt.h"

namespace refit::daemon {

class EpochQueue {
 public:
  struct Job {
    v1::ExecuteEpoch execute;
    std::shared_ptr<const v1::PlanSlice> slice;  // null: none was received
  };
  using Prepare = std::function<bool()>;
  using Run = std::function<void(const Job& job)>;

  // Starts the thread. `interrupt` is what Finish raises to stop a running epoch.
  EpochQueue(transport::Interrupt* interrupt, Prepare prepare, Run run);
  // Runs what is queued, then joins the thread.
  ~EpochQueue();
  EpochQueue(const EpochQueue&) = delete;
  EpochQueue& operator=(const EpochQueue&) = delete;

  // Queues `job` (the coordinator runs one epoch at a time: call Finish first).
  void Submit(Job job) ABSL_LOCKS_EXCLUDED(mu_);
  // Interrupts the running or queued epoch, if any (saying `reason`), and waits until it
  // has run.
  void Finish(std::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Has the thread call `prepare` again soon (after the running epoch, if any): there is
  // something new to prepare.
  void Nudge() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no epoch runs or waits, at most `timeout`; whether none does.
  bool AwaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool IdleLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !busy_ && !queued_; }

  transport::Interrupt* interrupt_;
  const Prepare prepare_;
  const Run run_;
  absl::Mutex mu_;
  std::optional<Job> queued_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_ ABSL_GUARDED_BY(mu_) = false;
  bool nudged_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is ready
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_EPOCH_QUEUE_H_
