#include "transport/synthetic_weights.h"

#include <functional>

namespace refit::transport {
namespace {

uint8_t WeightByte(uint64_t tensor_hash, int64_t linear, int byte, int64_t version) {
  uint64_t h = tensor_hash ^ (linear * 0x9E3779B97F4A7C15ULL + byte) ^
               (static_cast<uint64_t>(version) * 0xD6E8FEB86659FD93ULL);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  const uint8_t value = static_cast<uint8_t>(h);
  return value == kPoisonByte ? 0x5A : value;
}

// Visits every element of a box: its global linear index and its address.
template <typename Ref, typename Fn>
void ForEachElement(const Dims& shape, int element_bytes, const Dims& offset, const Dims& extent,
                    const Ref& memory, Fn fn) {
  for (int64_t e : extent) {
    if (e <= 0) return;
  }
  Dims index(extent.size(), 0);
  while (true) {
    int64_t linear = 0, element = 0;
    for (size_t d = 0; d < extent.size(); ++d) {
      linear = linear * shape[d] + offset[d] + index[d];
      element += index[d] * memory.strides[d];
    }
    fn(linear, memory.base + element * element_bytes);
    size_t d = extent.size();
    while (d > 0 && ++index[d - 1] == extent[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

void FillBox(const std::string& tensor, const Dims& shape, int element_bytes, const Dims& offset,
             const Dims& extent, const StridedRef& memory, int64_t version) {
  const uint64_t hash = std::hash<std::string>()(tensor);
  ForEachElement(shape, element_bytes, offset, extent, memory, [&](int64_t linear, uint8_t* at) {
    for (int b = 0; b < element_bytes; ++b) at[b] = WeightByte(hash, linear, b, version);
  });
}

int64_t WrongBytesInBox(const std::string& tensor, const Dims& shape, int element_bytes,
                        const Dims& offset, const Dims& extent, const ConstStridedRef& memory,
                        int64_t version) {
  const uint64_t hash = std::hash<std::string>()(tensor);
  int64_t wrong = 0;
  ForEachElement(shape, element_bytes, offset, extent, memory,
                 [&](int64_t linear, const uint8_t* at) {
                   for (int b = 0; b < element_bytes; ++b)
                     wrong += at[b] != WeightByte(hash, linear, b, version);
                 });
  return wrong;
}

}  // namespace refit::transport
