#include "transport/strided_copy.h"

#include <emmintrin.h>

#include <algorithm>
#include <cstring>

#include "xxhash.h"
// XXH3 through the library's run-time dispatch (AVX2 or AVX-512 where the CPU has them):
// the same hashes, about twice as fast as the SSE2 baseline on the way of every piece.
#include "xxh_x86dispatch.h"

namespace refit::transport {
namespace {

// Runs at least this long bypass the cache on the way out (non-temporal stores): weights
// copied once are not read again soon, and skipping the read-for-ownership of every
// destination line nearly doubles large-copy bandwidth.
constexpr int64_t kStreamingRunBytes = 64 << 10;

void StreamCopy(uint8_t* dst, const uint8_t* src, int64_t bytes) {
  const int64_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const int64_t blocks = bytes / 64;
  for (int64_t i = 0; i < blocks; ++i, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  std::memcpy(dst, src, bytes - blocks * 64);
}

}  // namespace

Collapsed Collapse(const Dims& extent, const Dims& src_strides, const Dims& dst_strides) {
  Collapsed c;
  for (size_t d = 0; d < extent.size(); ++d) {
    if (extent[d] == 1) continue;
    if (!c.extent.empty() && c.src.back() == src_strides[d] * extent[d] &&
        c.dst.back() == dst_strides[d] * extent[d]) {
      c.extent.back() *= extent[d];
      c.src.back() = src_strides[d];
      c.dst.back() = dst_strides[d];
      continue;
    }
    c.extent.push_back(extent[d]);
    c.src.push_back(src_strides[d]);
    c.dst.push_back(dst_strides[d]);
  }
  if (c.extent.empty()) {  // a single element
    c.extent.push_back(1);
    c.src.push_back(1);
    c.dst.push_back(1);
  }
  return c;
}

Dims RowMajorStrides(const Dims& extent) {
  Dims strides(extent.size(), 1);
  for (size_t d = extent.size(); d-- > 1;) strides[d - 1] = strides[d] * extent[d];
  return strides;
}

int64_t CountRuns(const Dims& extent, const Dims& src_strides, const Dims& dst_strides) {
  const Collapsed c = Collapse(extent, src_strides, dst_strides);
  const size_t inner = c.extent.size() - 1;
  const bool contiguous = c.src[inner] == 1 && c.dst[inner] == 1;
  int64_t runs = contiguous ? 1 : c.extent[inner];
  for (size_t d = 0; d < inner; ++d) runs *= c.extent[d];
  return runs;
}

bool HoldsNothing(const Dims& extent) {
  return std::any_of(extent.begin(), extent.end(), [](int64_t e) { return e <= 0; });
}

namespace {

// Calls `visit(from, to, bytes)` for the runs of a box copy from `src` to `dst`, in the
// box's row-major order: contiguous runs where both sides allow, single elements otherwise.
template <typename Visit>
void ForEachRunPair(const Dims& extent, int element_bytes, const ConstStridedRef& src,
                    const StridedRef& dst, Visit visit) {
  if (HoldsNothing(extent)) return;
  const Collapsed c = Collapse(extent, src.strides, dst.strides);
  const size_t rank = c.extent.size();
  const size_t inner = rank - 1;
  const bool contiguous = c.src[inner] == 1 && c.dst[inner] == 1;
  const int64_t src_step = c.src[inner] * element_bytes, dst_step = c.dst[inner] * element_bytes;
  Dims index(rank, 0);
  while (true) {
    int64_t src_offset = 0, dst_offset = 0;
    for (size_t d = 0; d < inner; ++d) {
      src_offset += index[d] * c.src[d];
      dst_offset += index[d] * c.dst[d];
    }
    const uint8_t* from = src.base + src_offset * element_bytes;
    uint8_t* to = dst.base + dst_offset * element_bytes;
    if (contiguous) {
      visit(from, to, c.extent[inner] * element_bytes);
    } else {
      for (int64_t i = 0; i < c.extent[inner]; ++i, from += src_step, to += dst_step) {
        visit(from, to, static_cast<int64_t>(element_bytes));
      }
    }
    // Next row: advance the outer dims like an odometer.
    size_t d = inner;
    while (true) {
      if (d == 0) return;
      --d;
      if (++index[d] < c.extent[d]) break;
      index[d] = 0;
    }
  }
}

// Hashing copies go through the cache in slices this long, each hashed while it is there.
constexpr int64_t kHashSliceBytes = 32 << 10;

// A streaming XXH3-64 state that frees itself.
class HashState {
 public:
  HashState() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~HashState() { XXH3_freeState(state_); }
  HashState(const HashState&) = delete;
  HashState& operator=(const HashState&) = delete;
  void Update(const uint8_t* data, int64_t bytes) { XXH3_64bits_update(state_, data, bytes); }
  uint64_t Digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

}  // namespace

void CopyBox(const Dims& extent, int element_bytes, const ConstStridedRef& src,
             const StridedRef& dst) {
  ForEachRunPair(extent, element_bytes, src, dst,
                 [](const uint8_t* from, uint8_t* to, int64_t bytes) {
                   if (bytes >= kStreamingRunBytes) {
                     StreamCopy(to, from, bytes);
                   } else {
                     std::memcpy(to, from, bytes);
                   }
                 });
  _mm_sfence();  // order the streaming stores before anyone reads the copy
}

void CopyBox(const Dims& extent, int element_bytes, const ConstStridedRef& src,
             const StridedRef& dst, uint64_t* source_hash, uint64_t* destination_hash) {
  if (source_hash == nullptr && destination_hash == nullptr) {
    CopyBox(extent, element_bytes, src, dst);
    return;
  }
  HashState copied;
  ForEachRunPair(extent, element_bytes, src, dst,
                 [&](const uint8_t* from, uint8_t* to, int64_t bytes) {
                   for (int64_t at = 0; at < bytes; at += kHashSliceBytes) {
                     const int64_t slice = std::min(kHashSliceBytes, bytes - at);
                     std::memcpy(to + at, from + at, slice);
                     copied.Update(from + at, slice);  // still in cache
                   }
                 });
  const uint64_t hash = copied.Digest();
  if (source_hash != nullptr) *source_hash = hash;
  if (destination_hash != nullptr) *destination_hash = hash;
}

void ForEachRun(const Dims& extent, int element_bytes, const ConstStridedRef& box,
                const std::function<void(const uint8_t* data, int64_t bytes)>& visit) {
  if (HoldsNothing(extent)) return;
  // Against a dense row-major twin, runs are contiguous in memory and in logical order.
  const Collapsed c = Collapse(extent, box.strides, RowMajorStrides(extent));
  const size_t inner = c.extent.size() - 1;
  const bool contiguous = c.src[inner] == 1;
  Dims index(c.extent.size(), 0);
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < inner; ++d) offset += index[d] * c.src[d];
    const uint8_t* run = box.base + offset * element_bytes;
    if (contiguous) {
      visit(run, c.extent[inner] * element_bytes);
    } else {
      for (int64_t i = 0; i < c.extent[inner]; ++i) {
        visit(run + i * c.src[inner] * element_bytes, element_bytes);
      }
    }
    size_t d = inner;
    while (true) {
      if (d == 0) return;
      --d;
      if (++index[d] < c.extent[d]) break;
      index[d] = 0;
    }
  }
}

uint64_t HashBox(const Dims& extent, int element_bytes, const ConstStridedRef& box) {
  HashState state;
  ForEachRun(extent, element_bytes, box,
             [&](const uint8_t* data, int64_t bytes) { state.Update(data, bytes); });
  return state.Digest();
}

}  // namespace refit::transport
