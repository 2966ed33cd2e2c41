// Test helpers: layouts backed by real shared-memory segments, source views filled with a
// value per (tensor, global element), and a count of destination bytes that differ.
#ifndef REFIT_TRANSPORT_TESTING_BACKED_LAYOUTS_H_
#define REFIT_TRANSPORT_TESTING_BACKED_LAYOUTS_H_

#include <memory>
#include <string>
#include <vector>

#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/shared_memory.h"

namespace refit::transport::testing {

// A shared-memory name no other process uses ("/<prefix>-<random>-<counter>"): test
// sandboxes reuse process ids and share /dev/shm.
std::string UniqueShmName(const std::string& prefix);

class BackedLayouts {
 public:
  // Gives every buffer of `spec` a poisoned segment (views without a buffer get their
  // own) and returns the registration form of the layout.
  v1::LayoutSpec Back(const v1::LayoutSpec& spec, const std::string& side);

 private:
  std::vector<std::unique_ptr<SharedMemorySegment>> segments_;
};

// Element size and shape of every tensor of `spec`.
TensorTable TensorsOf(const v1::LayoutSpec& spec);

// Writes each element's value into every view of `rank` (registered in `map`).
void FillViews(BufferMap* map, v1::Role role, const v1::RankLayout& rank);

// Bytes of the rank's views that do not hold their element's value.
int64_t WrongBytes(const BufferMap& map, v1::Role role, const v1::RankLayout& rank);

}  // namespace refit::transport::testing

#endif  // REFIT_TRANSPORT_TESTING_BACKED_LAYOUTS_H_
