#include "refitd/engine_pauses.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "refitd/queued_stream.h"

namespace refit::daemon {

void EnginePauses::Serve(int64_t rank, const std::string& session,
                         const std::function<bool(const v1::WriteNotice&)>& send,
                         const std::function<bool()>& ended) {
  uint64_t attachment;
  {
    absl::MutexLock lock(&mu_);
    attachment = ++attachments_;
    Channel& channel = channels_[rank];
    if (channel.session != session) channel = Channel{};  // a new registration of the rank
    channel.session = session;
    channel.attachment = attachment;
    channel.outgoing.clear();
  }
  v1::WriteNotice attached;
  attached.set_kind(v1::WriteNotice::ATTACHED);
  ServeAttachment<Channel, v1::WriteNotice>(mu_, &channels_, rank, attachment, attached, send,
                                            ended);
}

absl::Status EnginePauses::Paused(int64_t rank, const std::string& session,
                                  const std::string& pause_id) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(rank);
  if (it == channels_.end() || it->second.session != session) {
    return absl::FailedPreconditionError(absl::StrCat(
        "destination rank ", rank, " has no WatchWrites stream open for this registration"));
  }
  if (it->second.asked != pause_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "destination rank ", rank, " was not asked to pause for ", pause_id,
        it->second.asked.empty() ? "" : absl::StrCat(" (it was for ", it->second.asked, ")")));
  }
  it->second.paused = true;
  return absl::OkStatus();
}

std::vector<int64_t> EnginePauses::Pause(const v1::PauseRanks& request, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> asked;
  for (int64_t rank : request.ranks()) {
    auto it = channels_.find(rank);
    if (it == channels_.end()) continue;  // no stream: it cannot pause
    Channel& channel = it->second;
    if (!channel.asked.empty() && channel.paused) {
      channel.asked = request.pause_id();  // still paused from an earlier request
      channel.version = request.version();
    } else {
      channel.version = request.version();
      channel.asked = request.pause_id();
      channel.paused = false;
      v1::WriteNotice& notice = channel.outgoing.emplace_back();
      notice.set_kind(v1::WriteNotice::BEFORE_WRITE);
      notice.set_pause_id(request.pause_id());
      notice.set_version(request.version());
      notice.set_deadline_ms(
          std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    }
    asked.push_back(rank);
  }
  auto paused_ranks = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<int64_t> paused;
    for (int64_t rank : asked) {
      auto it = channels_.find(rank);
      if (it != channels_.end() && it->second.asked == request.pause_id() && it->second.paused) {
        paused.push_back(rank);
      }
    }
    return paused;
  };
  // Done when every rank asked paused, left, or was resumed (refitd stopping).
  auto all_settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (int64_t rank : asked) {
      auto it = channels_.find(rank);
      if (it != channels_.end() && it->second.asked == request.pause_id() && !it->second.paused) {
        return false;
      }
    }
    return true;
  };
  mu_.AwaitWithDeadline(absl::Condition(&all_settled), deadline);
  return paused_ranks();
}

void EnginePauses::ResumeLocked(Channel* channel, v1::WriteNotice::Kind kind, int64_t version,
                                const std::string& reason) {
  if (channel->asked.empty()) return;
  v1::WriteNotice& notice = channel->outgoing.emplace_back();
  notice.set_kind(kind);
  notice.set_pause_id(channel->asked);
  notice.set_version(version);
  notice.set_reason(reason);
  channel->asked.clear();
  channel->paused = false;
}

void EnginePauses::Resume(const std::vector<int64_t>& ranks, v1::WriteNotice::Kind kind,
                          int64_t version, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  for (int64_t rank : ranks) {
    auto it = channels_.find(rank);
    if (it != channels_.end()) ResumeLocked(&it->second, kind, version, reason);
  }
}

void EnginePauses::ResumeUpTo(v1::WriteNotice::Kind kind, int64_t version,
                              const std::string& reason) {
  absl::MutexLock lock(&mu_);
  for (auto& [rank, channel] : channels_) {
    if (channel.version <= version) {
      ResumeLocked(&channel, kind, version == kAll ? channel.version : version, reason);
    }
  }
}

}  // namespace refit::daemon
