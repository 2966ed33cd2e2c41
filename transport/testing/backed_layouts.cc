#include "transport/testing/backed_layouts.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/dtype.h"
#include "planner/layout.h"

namespace refit::transport::testing {
namespace {

uint8_t ValueByte(const std::string& tensor, int64_t linear, int byte) {
  uint64_t h = std::hash<std::string>()(tensor) ^ (linear * 0x9E3779B97F4A7C15ULL + byte);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  const uint8_t value = static_cast<uint8_t>(h >> 32);
  return value == 0xA5 ? 0x5A : value;  // never the poison
}

// Visits every element of view `view`: its global linear index and its memory.
void ForEachElement(const BufferMap& map, v1::Role role, const v1::RankLayout& rank, int view,
                    const std::function<void(int64_t, uint8_t*, int)>& fn) {
  const v1::ShardView& v = rank.views(view);
  const Dims offset(v.offset().begin(), v.offset().end());
  const Dims extent(v.extent().begin(), v.extent().end());
  const TensorShape& shape = map.tensors().at(v.tensor());
  absl::StatusOr<StridedRef> ref = map.Locate(role, rank.rank(), view, v.tensor(), offset, extent);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Dims index(extent.size(), 0);
  while (true) {
    int64_t linear = 0, element = 0;
    for (size_t d = 0; d < extent.size(); ++d) {
      linear = linear * shape.shape[d] + offset[d] + index[d];
      element += index[d] * ref->strides[d];
    }
    fn(linear, ref->base + element * shape.element_bytes, shape.element_bytes);
    size_t d = extent.size();
    while (d > 0 && ++index[d - 1] == extent[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

std::string UniqueShmName(const std::string& prefix) {
  static const uint64_t process_token =
      (uint64_t{std::random_device()()} << 32) ^ std::random_device()();
  static std::atomic<int64_t> next{0};
  return absl::StrCat("/", prefix, "-", absl::Hex(process_token), "-", next++);
}

v1::LayoutSpec BackedLayouts::Back(const v1::LayoutSpec& spec, const std::string& side) {
  absl::StatusOr<planner::Layout> layout = planner::CompileLayout(spec, side);
  EXPECT_TRUE(layout.ok()) << layout.status();
  v1::LayoutSpec out = spec;
  for (int r = 0; r < out.ranks_size(); ++r) {
    v1::RankLayout* rank = out.mutable_ranks(r);
    rank->clear_buffers();
    for (int v = 0; v < rank->views_size(); ++v) {
      if (rank->views(v).buffer().empty()) {
        rank->mutable_views(v)->set_buffer(absl::StrCat("#view", v));
      }
    }
    for (const planner::BufferInfo& buffer : layout->ranks[r].buffers) {
      const std::string shm = UniqueShmName("refit-test");
      auto segment = SharedMemorySegment::Create(shm, buffer.bytes);
      EXPECT_TRUE(segment.ok()) << segment.status();
      std::memset((*segment)->data(), 0xA5, buffer.bytes);
      segments_.push_back(std::move(*segment));
      v1::BufferSpec* registered = rank->add_buffers();
      registered->set_name(buffer.name);
      registered->set_bytes(buffer.bytes);
      registered->set_shm_name(shm);
    }
  }
  return out;
}

TensorTable TensorsOf(const v1::LayoutSpec& spec) {
  TensorTable tensors;
  for (const v1::TensorSpec& t : spec.tensors()) {
    tensors[t.name()] =
        TensorShape{*planner::DtypeBytes(t.dtype()), Dims(t.shape().begin(), t.shape().end())};
  }
  return tensors;
}

void FillViews(const BufferMap& map, v1::Role role, const v1::RankLayout& rank) {
  for (int v = 0; v < rank.views_size(); ++v) {
    const std::string& tensor = rank.views(v).tensor();
    ForEachElement(map, role, rank, v, [&](int64_t linear, uint8_t* at, int eb) {
      for (int b = 0; b < eb; ++b) at[b] = ValueByte(tensor, linear, b);
    });
  }
}

int64_t WrongBytes(const BufferMap& map, v1::Role role, const v1::RankLayout& rank) {
  int64_t wrong = 0;
  for (int v = 0; v < rank.views_size(); ++v) {
    const std::string& tensor = rank.views(v).tensor();
    ForEachElement(map, role, rank, v, [&](int64_t linear, uint8_t* at, int eb) {
      for (int b = 0; b < eb; ++b) wrong += at[b] != ValueByte(tensor, linear, b);
    });
  }
  return wrong;
}

}  // namespace refit::transport::testing
