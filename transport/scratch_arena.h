// Dense full-tensor scratch buffers of the ranks one refitd serves, created on first use
// and kept for one plan run (gather_broadcast's intermediate copies).
#ifndef REFIT_TRANSPORT_SCRATCH_ARENA_H_
#define REFIT_TRANSPORT_SCRATCH_ARENA_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/strided_copy.h"

namespace refit::transport {

class ScratchArena {
 public:
  explicit ScratchArena(const TensorTable& tensors) : tensors_(tensors) {}

  // Memory of the box of `tensor` in the scratch copy of (role, rank).
  absl::StatusOr<StridedRef> Locate(v1::Role role, int64_t rank, const std::string& tensor,
                                    const Dims& offset, const Dims& extent);

 private:
  const TensorTable& tensors_;
  std::map<std::tuple<int, int64_t, std::string>, std::vector<uint8_t>> buffers_;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_SCRATCH_ARENA_H_
