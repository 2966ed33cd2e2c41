#include "transport/posted_operations.h"

#include "absl/strings/str_cat.h"

namespace refit::transport {

std::vector<std::vector<PendingOperation>*> PostedOperations::Lists() {
  return {&rounds[0],     &rounds[1],  &receipts_awaited[0], &receipts_awaited[1],
          &receipts_sent, &words_sent, &words_received};
}

PostedOperations::~PostedOperations() {
  std::vector<PendingOperation> posted;
  for (std::vector<PendingOperation>* list : Lists()) {
    posted.insert(posted.end(), list->begin(), list->end());
    list->clear();
  }
  if (posted.empty() || worker_ == nullptr) return;
  // Posted operations must not outlive their buffers: cancelled now.
  const size_t lingering = worker_->lingering_receives();
  const int64_t abandoned = worker_->abandoned_operations();
  worker_->WaitAll(&posted, absl::Now()).IgnoreError();
  AbandonIfLeftRunning(lingering, abandoned);
}

absl::Status PostedOperations::Wait(std::vector<PendingOperation>* list) {
  if (list->empty()) return absl::OkStatus();
  const size_t lingering = worker_->lingering_receives();
  const int64_t abandoned = worker_->abandoned_operations();
  absl::Status done = worker_->WaitAll(list, deadline_, stall_limit_);
  if (!done.ok()) {
    AbandonIfLeftRunning(lingering, abandoned);
    list->clear();
    return absl::Status(done.code(), absl::StrCat("batch ", batch_, ": ", done.message()));
  }
  return absl::OkStatus();
}

absl::Status PostedOperations::WaitForAll() {
  for (std::vector<PendingOperation>* list : Lists()) {
    if (absl::Status done = Wait(list); !done.ok()) return done;
  }
  return absl::OkStatus();
}

void PostedOperations::AbandonIfLeftRunning(size_t lingering, int64_t abandoned) {
  if (worker_->lingering_receives() > lingering || worker_->abandoned_operations() > abandoned) {
    staging_->Abandon(-1);
  }
}

}  // namespace refit::transport
