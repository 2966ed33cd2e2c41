// Serves one process's stream of queued messages: the local service's server-streaming
// calls (ReceiveBuckets: refitd/bucket_streams.h; WatchWrites: refitd/engine_pauses.h). Each
// keeps, per rank, a queue the daemon's threads fill under its mutex and the attachment
// (the Serve call) that owns it. ServeAttachment waits under that mutex for a message or
// for a newer attachment that replaces this one, takes the first message and sends it
// outside the lock, one at a time and in order (so what the owner drops from the queue
// meanwhile, an ended epoch's buckets, is never sent), until a send fails, the stream
// ended, or it is replaced.
//
// The one poll: `ended` is asked at least every kStreamEndCheck. gRPC's synchronous API
// says that a client went away only when asked (ServerContext::IsCancelled), and the
// registry learns that a rank's process died by looking at its connection. Everything else
// (a message queued, a newer attachment) wakes the wait at once.
//
// Threading: runs on the stream's gRPC handler thread, taking `mu` to read the queue.
#ifndef REFIT_REFITD_QUEUED_STREAM_H_
#define REFIT_REFITD_QUEUED_STREAM_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace refit::daemon {

inline constexpr absl::Duration kStreamEndCheck = absl::Milliseconds(100);

// Serves the stream attached as `attachment` to `(*channels)[rank]` (a Channel has the
// fields `attachment`, the owning Serve call's number, and `outgoing`, the queue): sends
// `attached` first (the process learns its stream is in place), then the queue, and
// forgets the channel at the end unless a newer attachment owns it. `channels` is guarded
// by `mu`.
template <typename Channel, typename Message>
void ServeAttachment(absl::Mutex& mu, std::map<int64_t, Channel>* channels, int64_t rank,
                     uint64_t attachment, const Message& attached,
                     const std::function<bool(const Message&)>& send,
                     const std::function<bool()>& ended) {
  // This attachment's channel, or null once replaced; called with `mu` held.
  auto mine = [&]() -> Channel* {
    auto it = channels->find(rank);
    return it == channels->end() || it->second.attachment != attachment ? nullptr : &it->second;
  };
  if (send(attached)) {
    while (!ended()) {
      std::optional<Message> message;
      {
        absl::MutexLock lock(&mu);
        auto ready = [&]() { return mine() == nullptr || !mine()->outgoing.empty(); };
        mu.AwaitWithTimeout(absl::Condition(&ready), kStreamEndCheck);
        Channel* channel = mine();
        if (channel == nullptr) return;  // replaced by a newer attachment
        if (!channel->outgoing.empty()) {
          message = std::move(channel->outgoing.front());
          channel->outgoing.pop_front();
        }
      }
      if (message.has_value() && !send(*message)) break;
    }
  }
  absl::MutexLock lock(&mu);
  if (mine() != nullptr) channels->erase(rank);
}

}  // namespace refit::daemon

#endif  // REFIT_REFITD_QUEUED_STREAM_H_
