// Deterministic weights for synthetic ranks and tests: every element of every tensor has a
// value determined by (tensor, global index, version), never the poison byte 0xA5, so a
// destination can check each byte it received without holding the source.
#ifndef REFIT_TRANSPORT_SYNTHETIC_WEIGHTS_H_
#define REFIT_TRANSPORT_SYNTHETIC_WEIGHTS_H_

#include <cstdint>
#include <string>

#include "transport/strided_copy.h"

namespace refit::transport {

inline constexpr uint8_t kPoisonByte = 0xA5;

// Writes the values of `version` into a box of `tensor` (global `shape`) held at `memory`.
void FillBox(const std::string& tensor, const Dims& shape, int element_bytes, const Dims& offset,
             const Dims& extent, const StridedRef& memory, int64_t version);

// Bytes of the box that do not hold their value for `version`.
int64_t WrongBytesInBox(const std::string& tensor, const Dims& shape, int element_bytes,
                        const Dims& offset, const Dims& extent, const ConstStridedRef& memory,
                        int64_t version);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_SYNTHETIC_WEIGHTS_H_
