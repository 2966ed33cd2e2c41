// refitd's half of the bucketed path (RankLayout.bucketed): the stream each bucketed
// destination rank's process holds open (LocalDaemon.ReceiveBuckets) and the hand-over of
// each full bucket during an epoch. The data plane fills a rank's bucket
// (transport::BucketFiller over the rank's mapped bucket), sends it down the rank's
// stream, and waits for the process's BucketDone before it refills the bucket; the wait
// ends at the epoch's deadline, at an interrupt, or when the stream goes away, each with
// an error naming the rank.
#ifndef REFIT_REFITD_BUCKET_STREAMS_H_
#define REFIT_REFITD_BUCKET_STREAMS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/refit.pb.h"
#include "transport/bucket_filler.h"
#include "transport/buffer_map.h"
#include "transport/destination_sink.h"
#include "transport/interrupt.h"

namespace refit::daemon {

class BucketStreams {
 public:
  // What the epoch about to run needs to hand its buckets over.
  struct EpochContext {
    std::string epoch_id;
    int64_t version = -1;
    absl::Time deadline = absl::InfiniteFuture();
    const transport::Interrupt* interrupt = nullptr;
    // A process that takes no bucket for this long stopped draining: its rank's wait ends
    // (DEADLINE_EXCEEDED naming it) and the rank counts as stalled (StalledIn).
    absl::Duration stall = absl::InfiniteDuration();
  };

  // A sink for the executor over the bucketed ranks of `buffers` among `planned` (this
  // daemon's destination ranks the epoch writes); it lives for one Run.
  std::unique_ptr<transport::DestinationSink> SinkFor(transport::BufferMap* buffers,
                                                      const std::set<int64_t>& planned,
                                                      const EpochContext& epoch);

  // ReceiveBuckets: attaches the stream of bucketed destination rank `rank` (registered
  // under `session`), says so with an empty bucket of sequence 0, then sends (`send`)
  // each bucket the data plane hands over, until `ended()` (checked every 100 ms: the
  // process went away, or the rank left) or `send` fails. A newer attachment for the rank
  // replaces this one.
  void Serve(int64_t rank, const std::string& session,
             const std::function<bool(const v1::Bucket&)>& send, const std::function<bool()>& ended)
      ABSL_LOCKS_EXCLUDED(mu_);

  // BucketDone: the process of `rank` has taken bucket `sequence` of `epoch_id` (or could
  // not: `error`).
  absl::Status Done(int64_t rank, const std::string& session, const std::string& epoch_id,
                    int64_t sequence, const std::string& error) ABSL_LOCKS_EXCLUDED(mu_);

  // Queues `parts` (in the rank's bucket) for the process of `rank` and returns the
  // hand-over's sequence; AwaitTaken returns once the process has taken every hand-over
  // up to `sequence` (the sink's two halves: one is filled while the other is copied out).
  absl::StatusOr<int64_t> Send(int64_t rank, const std::vector<transport::BucketPart>& parts,
                               bool last, const EpochContext& epoch) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AwaitTaken(int64_t rank, int64_t sequence, const EpochContext& epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The ranks whose processes stopped taking buckets of epoch `epoch_id` (its stall).
  std::vector<int64_t> StalledIn(const std::string& epoch_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The epoch's run is over (done or failed): hand-overs of it not yet sent are dropped,
  // so a failed epoch sends the process nothing more.
  void EndEpoch(int64_t rank, const std::string& epoch_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Channel {
    std::string session;
    uint64_t attachment = 0;          // which Serve call owns it
    std::deque<v1::Bucket> outgoing;  // handed over, not yet sent
    std::string epoch_id;
    int64_t sent = 0;           // the last sequence handed over in this epoch
    int64_t taken = 0;          // the last sequence the process said it took (they come in order)
    std::string error;          // what the process said it could not do
    int64_t failed = 0;         // the sequence it said that of (0: none)
    absl::Duration last_taken;  // MonotonicNow() of the epoch's first hand-over or last take
    std::string stalled_epoch;  // the epoch it stopped taking buckets in
  };

  absl::Mutex mu_;
  std::map<int64_t, Channel> channels_ ABSL_GUARDED_BY(mu_);
  uint64_t next_attachment_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_BUCKET_STREAMS_H_
