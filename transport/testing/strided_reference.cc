#include "transport/testing/strided_reference.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace refit::transport::testing {

Dims RandomExtent(std::mt19937& rng, size_t max_rank, int64_t max_extent) {
  const size_t rank = 1 + rng() % max_rank;
  Dims extent;
  for (size_t d = 0; d < rank; ++d) extent.push_back(1 + rng() % max_extent);
  return extent;
}

Dims RandomStrides(std::mt19937& rng, const Dims& extent) {
  std::vector<size_t> order(extent.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  Dims strides(extent.size());
  int64_t span = 1;
  for (size_t d : order) {
    strides[d] = span;
    span = span * extent[d] + (rng() % 3 == 0 ? rng() % 3 : 0);
  }
  return strides;
}

int64_t Span(const Dims& extent, const Dims& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < extent.size(); ++d) last += (extent[d] - 1) * strides[d];
  return last + 1;
}

void ReferenceCopy(const Dims& extent, int eb, const uint8_t* src, const Dims& ss, uint8_t* dst,
                   const Dims& ds) {
  Dims index(extent.size(), 0);
  int64_t total = 1;
  for (int64_t e : extent) total *= e;
  for (int64_t n = 0; n < total; ++n) {
    int64_t s = 0, t = 0, rest = n;
    for (size_t d = extent.size(); d-- > 0;) {
      const int64_t i = rest % extent[d];
      rest /= extent[d];
      s += i * ss[d];
      t += i * ds[d];
    }
    for (int b = 0; b < eb; ++b) dst[t * eb + b] = src[s * eb + b];
  }
}

}  // namespace refit::transport::testing
