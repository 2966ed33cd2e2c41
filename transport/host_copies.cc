#include "transport/host_copies.h"

#include <algorithm>
#include <thread>

#include "transport/memory_fault_guard.h"

namespace refit::transport {
namespace {

// Below this a batch's copies are not worth a thread's start.
constexpr int64_t kBytesPerExtraThread = 4 << 20;

int64_t BytesOf(const HostCopy& copy) {
  int64_t bytes = copy.element_bytes;
  for (int64_t e : copy.extent) bytes *= e;
  return bytes;
}

void RunRange(HostCopy* begin, HostCopy* end) {
  for (HostCopy* copy = begin; copy != end; ++copy) {
    copy->status = GuardMemoryAccess("a copy between host buffers", [copy] {
      CopyBox(copy->extent, copy->element_bytes, copy->from, copy->to,
              copy->hash_source ? &copy->source_hash : nullptr,
              copy->hash_destination ? &copy->destination_hash : nullptr);
    });
  }
}

}  // namespace

void RunHostCopies(std::vector<HostCopy>* copies, int threads) {
  int64_t total = 0;
  for (const HostCopy& copy : *copies) total += BytesOf(copy);
  const int64_t useful = std::max<int64_t>(1, total / kBytesPerExtraThread);
  const int parts = static_cast<int>(
      std::min<int64_t>({std::max(1, threads), useful, static_cast<int64_t>(copies->size())}));
  if (parts <= 1) {
    RunRange(copies->data(), copies->data() + copies->size());
    return;
  }
  // Consecutive runs of about total / parts bytes each; the last one is this thread's.
  std::vector<std::thread> helpers;
  HostCopy* begin = copies->data();
  HostCopy* const end = copies->data() + copies->size();
  int64_t taken = 0;
  for (int part = 1; part < parts && begin != end; ++part) {
    HostCopy* cut = begin;
    const int64_t until = total * part / parts;
    while (cut != end && (cut == begin || taken + BytesOf(*cut) <= until)) taken += BytesOf(*cut++);
    helpers.emplace_back(RunRange, begin, cut);
    begin = cut;
  }
  RunRange(begin, end);
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace refit::transport
