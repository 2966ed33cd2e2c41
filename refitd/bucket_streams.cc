#include "refitd/bucket_streams.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/monotonic_clock.h"
#include "refitd/queued_stream.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {
namespace {

std::string Who(int64_t rank) { return absl::StrCat("destination rank ", rank); }

class BucketSink final : public transport::DestinationSink {
 public:
  BucketSink(BucketStreams* streams, BucketStreams::EpochContext epoch)
      : streams_(streams), epoch_(std::move(epoch)) {}
  ~BucketSink() override {
    for (const auto& [rank, filler] : fillers_) streams_->EndEpoch(rank, epoch_.epoch_id);
  }

  void Add(int64_t rank, transport::MappedBuffer* bucket) {
    fillers_.emplace(rank,
                     std::make_unique<transport::BucketFiller>(
                         bucket->data(), bucket->bytes(),
                         [this, rank](const std::vector<transport::BucketPart>& parts, bool last) {
                           return streams_->Send(rank, parts, last, epoch_);
                         },
                         [this, rank](int64_t sequence) {
                           return streams_->AwaitTaken(rank, sequence, epoch_);
                         }));
  }

  bool Takes(int64_t rank) const override { return fillers_.count(rank) > 0; }

  absl::Status Write(int64_t rank, const std::string& tensor, const transport::Dims& offset,
                     const transport::Dims& extent, int element_bytes,
                     const transport::ConstStridedRef& from) override {
    return fillers_.at(rank)->Write(tensor, offset, extent, element_bytes, from);
  }

  absl::Status Finish() override {
    for (auto& [rank, filler] : fillers_) {
      absl::Status finished = filler->Finish();
      if (!finished.ok()) return finished;
      spdlog::debug("refitd: epoch {}: {} took {} bytes in {} buckets", epoch_.epoch_id, Who(rank),
                    filler->bytes_written(), filler->buckets_delivered());
    }
    return absl::OkStatus();
  }

 private:
  BucketStreams* const streams_;
  const BucketStreams::EpochContext epoch_;
  std::map<int64_t, std::unique_ptr<transport::BucketFiller>> fillers_;
};

}  // namespace

std::unique_ptr<transport::DestinationSink> BucketStreams::SinkFor(transport::BufferMap* buffers,
                                                                   const std::set<int64_t>& planned,
                                                                   const EpochContext& epoch) {
  auto sink = std::make_unique<BucketSink>(this, epoch);
  for (int64_t rank : planned) {
    absl::StatusOr<transport::MappedBuffer*> bucket = buffers->BucketOf(rank);
    if (bucket.ok()) sink->Add(rank, *bucket);
  }
  return sink;
}

void BucketStreams::Serve(int64_t rank, const std::string& session,
                          const std::function<bool(const v1::Bucket&)>& send,
                          const std::function<bool()>& ended) {
  uint64_t attachment = 0;
  {
    absl::MutexLock lock(&mu_);
    attachment = ++next_attachment_;
    Channel& channel = channels_[rank];
    channel = Channel();
    channel.session = session;
    channel.attachment = attachment;
  }
  v1::Bucket attached;  // sequence 0, no pieces: the stream is in place
  ServeAttachment<Channel, v1::Bucket>(mu_, &channels_, rank, attachment, attached, send, ended);
}

void BucketStreams::EndEpoch(int64_t rank, const std::string& epoch_id) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(rank);
  if (it != channels_.end() && it->second.epoch_id == epoch_id) it->second.outgoing.clear();
}

absl::Status BucketStreams::Done(int64_t rank, const std::string& session,
                                 const std::string& epoch_id, int64_t sequence,
                                 const std::string& error) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(rank);
  if (it == channels_.end() || it->second.session != session) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(rank), ": no bucket stream is open for session ", session));
  }
  Channel& channel = it->second;
  if (epoch_id != channel.epoch_id) {
    return absl::FailedPreconditionError(absl::StrCat(Who(rank), ": bucket ", sequence,
                                                      " of epoch ", epoch_id,
                                                      " is from an epoch that ended ("
                                                      "epoch ",
                                                      channel.epoch_id, " runs now)"));
  }
  if (sequence != channel.taken + 1 || sequence > channel.sent) {
    return absl::InvalidArgumentError(absl::StrCat(
        Who(rank), ": bucket ", sequence, " of epoch ", epoch_id, " is not the next one to take (",
        channel.taken + 1, " of epoch ", channel.epoch_id, ", ", channel.sent, " sent)"));
  }
  channel.taken = sequence;
  channel.last_taken = MonotonicNow();
  if (!error.empty() && channel.failed == 0) {
    channel.failed = sequence;
    channel.error = error;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BucketStreams::Send(int64_t rank,
                                            const std::vector<transport::BucketPart>& parts,
                                            bool last, const EpochContext& epoch) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(rank);
  if (it == channels_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(rank),
                     " receives its weights in buckets, but its process holds no bucket stream "
                     "open (LocalDaemon.ReceiveBuckets)"));
  }
  Channel& channel = it->second;
  if (channel.epoch_id != epoch.epoch_id) {  // the epoch's first hand-over
    channel.epoch_id = epoch.epoch_id;
    channel.outgoing.clear();
    channel.sent = 0;
    channel.taken = 0;
    channel.failed = 0;
    channel.error.clear();
    channel.last_taken = MonotonicNow();
  }
  if (channel.failed > 0) {  // the process already said it could not take one
    return absl::AbortedError(absl::StrCat(Who(rank), ": its process could not take bucket ",
                                           channel.failed, ": ", channel.error));
  }
  v1::Bucket& bucket = channel.outgoing.emplace_back();
  bucket.set_epoch_id(epoch.epoch_id);
  bucket.set_version(epoch.version);
  bucket.set_sequence(++channel.sent);
  bucket.set_last(last);
  for (const transport::BucketPart& part : parts) {
    v1::BucketPiece* piece = bucket.add_pieces();
    piece->set_tensor(part.tensor);
    piece->mutable_offset()->Add(part.offset.begin(), part.offset.end());
    piece->mutable_extent()->Add(part.extent.begin(), part.extent.end());
    piece->set_byte_offset(part.byte_offset);
  }
  return channel.sent;
}

absl::Status BucketStreams::AwaitTaken(int64_t rank, int64_t sequence, const EpochContext& epoch) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(rank);
  const uint64_t attachment = it == channels_.end() ? 0 : it->second.attachment;
  // A slice at a time, so that an interrupt is seen.
  while (true) {
    auto c = channels_.find(rank);
    if (c == channels_.end() || c->second.attachment != attachment ||
        c->second.epoch_id != epoch.epoch_id) {
      return absl::UnavailableError(absl::StrCat(
          Who(rank), ": its process closed the bucket stream before taking bucket ", sequence));
    }
    Channel& channel = c->second;
    if (channel.failed > 0 && channel.failed <= sequence) {
      return absl::AbortedError(absl::StrCat(Who(rank), ": its process could not take bucket ",
                                             channel.failed, ": ", channel.error));
    }
    if (channel.taken >= sequence) return absl::OkStatus();
    if (epoch.interrupt != nullptr && epoch.interrupt->raised()) {
      channel.outgoing.clear();
      return absl::CancelledError(
          absl::StrCat(Who(rank), ": interrupted (", epoch.interrupt->reason(),
                       ") while its process held bucket ", channel.taken + 1));
    }
    if (absl::Now() >= epoch.deadline) {
      channel.outgoing.clear();
      return absl::DeadlineExceededError(absl::StrCat(Who(rank),
                                                      ": its process did not take bucket ",
                                                      channel.taken + 1, " before the deadline"));
    }
    if (MonotonicNow() - channel.last_taken >= epoch.stall) {
      channel.outgoing.clear();
      channel.stalled_epoch = epoch.epoch_id;
      return absl::DeadlineExceededError(absl::StrCat(
          Who(rank), ": its process took no bucket for ", absl::ToInt64Milliseconds(epoch.stall),
          " ms (it holds bucket ", channel.taken + 1, " of epoch ", epoch.epoch_id,
          "): it stopped draining its buckets"));
    }
    auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto now = channels_.find(rank);
      return now == channels_.end() || now->second.attachment != attachment ||
             now->second.taken >= sequence || now->second.failed > 0;
    };
    mu_.AwaitWithDeadline(absl::Condition(&settled),
                          std::min(epoch.deadline, absl::Now() + absl::Milliseconds(50)));
  }
}

std::vector<int64_t> BucketStreams::StalledIn(const std::string& epoch_id) {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> stalled;
  for (const auto& [rank, channel] : channels_) {
    if (channel.stalled_epoch == epoch_id) stalled.push_back(rank);
  }
  return stalled;
}

}  // namespace refit::daemon
