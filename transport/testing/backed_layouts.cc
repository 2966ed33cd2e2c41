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
#include "transport/synthetic_weights.h"

namespace refit::transport::testing {
namespace {

// The box of view `view`.
struct ViewBox {
  std::string tensor;
  Dims offset, extent;
};

ViewBox BoxOf(const v1::RankLayout& rank, int view) {
  const v1::ShardView& v = rank.views(view);
  return ViewBox{v.tensor(), Dims(v.offset().begin(), v.offset().end()),
                 Dims(v.extent().begin(), v.extent().end())};
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
  absl::StatusOr<TensorTable> tensors = TensorTableOf(spec);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return tensors.ok() ? *std::move(tensors) : TensorTable();
}

void FillViews(BufferMap* map, v1::Role role, const v1::RankLayout& rank) {
  for (int v = 0; v < rank.views_size(); ++v) {
    const ViewBox box = BoxOf(rank, v);
    absl::StatusOr<StridedRef> memory =
        map->LocateForWrite(role, rank.rank(), v, box.tensor, box.offset, box.extent);
    EXPECT_TRUE(memory.ok()) << memory.status();
    if (!memory.ok()) continue;
    const TensorShape& shape = map->tensors().at(box.tensor);
    transport::FillBox(box.tensor, shape.shape, shape.element_bytes, box.offset, box.extent,
                       *memory, 0);
  }
}

int64_t WrongBytes(const BufferMap& map, v1::Role role, const v1::RankLayout& rank) {
  int64_t wrong = 0;
  for (int v = 0; v < rank.views_size(); ++v) {
    const ViewBox box = BoxOf(rank, v);
    absl::StatusOr<ConstStridedRef> memory =
        map.Locate(role, rank.rank(), v, box.tensor, box.offset, box.extent);
    EXPECT_TRUE(memory.ok()) << memory.status();
    if (!memory.ok()) return -1;
    const TensorShape& shape = map.tensors().at(box.tensor);
    wrong += transport::WrongBytesInBox(box.tensor, shape.shape, shape.element_bytes, box.offset,
                                        box.extent, *memory, 0);
  }
  return wrong;
}

}  // namespace refit::transport::testing
