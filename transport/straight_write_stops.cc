#include "transport/straight_write_stops.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace refit::transport {

StraightWriteStops::~StraightWriteStops() {
  if (!posted_.empty()) worker_->WaitAll(&posted_, absl::Now()).IgnoreError();
}

absl::Status StraightWriteStops::Expect(int32_t writer, uint64_t tag) {
  auto word = std::make_shared<int64_t>(0);
  absl::StatusOr<PendingOperation> posted = worker_->PostReceive(tag, word.get(), sizeof(*word));
  if (!posted.ok()) return posted.status();
  posted->what = absl::StrCat("daemon ", writer, "'s word that it stopped writing straight here");
  posted->memory_owner = std::move(word);
  posted_.push_back(*std::move(posted));
  expected_.push_back(writer);
  return absl::OkStatus();
}

absl::Status StraightWriteStops::Tell(int32_t peer, UcxEndpoint* endpoint, uint64_t tag) {
  if (!told_.insert(peer).second) return absl::OkStatus();
  if (endpoint == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("no connection to daemon ", peer));
  }
  auto word = std::make_shared<int64_t>(1);
  absl::StatusOr<PendingOperation> sent = endpoint->PostSend(tag, word.get(), sizeof(*word));
  if (!sent.ok()) return sent.status();
  sent->what = absl::StrCat("the word to daemon ", peer, " that writing straight there stopped");
  sent->memory_owner = std::move(word);
  posted_.push_back(*std::move(sent));
  expected_.push_back(-1);
  return absl::OkStatus();
}

absl::Status StraightWriteStops::Settle(absl::Duration limit) {
  if (posted_.empty()) return absl::OkStatus();
  std::vector<int32_t> writers = std::move(expected_);
  expected_.clear();
  std::vector<PendingOperation> posted = std::move(posted_);
  posted_.clear();
  absl::Status settled =
      worker_->WaitAll(&posted, absl::Now() + limit, limit, /*interruptible=*/false);
  if (settled.ok()) return settled;
  // A receive that completed has its word's length; the others were cancelled.
  std::vector<int32_t> silent;
  for (size_t i = 0; i < posted.size() && i < writers.size(); ++i) {
    if (writers[i] >= 0 && posted[i].length != sizeof(int64_t)) silent.push_back(writers[i]);
  }
  if (silent.empty()) return settled;  // a word of ours that did not go out
  return absl::UnavailableError(
      absl::StrCat("daemon", silent.size() > 1 ? "s " : " ", absl::StrJoin(silent, ", "),
                   " did not say within ", absl::FormatDuration(limit), " that ",
                   silent.size() > 1 ? "they" : "it", " stopped writing straight into ranks here"));
}

}  // namespace refit::transport
