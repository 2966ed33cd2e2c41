#include "planner/testing/layout_builder.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace refit::testing {

LayoutBuilder& LayoutBuilder::Tensor(const std::string& name, const std::vector<int64_t>& shape,
                                     const std::string& dtype) {
  v1::TensorSpec* t = spec_.add_tensors();
  t->set_name(name);
  t->set_dtype(dtype);
  t->mutable_shape()->Assign(shape.begin(), shape.end());
  return *this;
}

LayoutBuilder& LayoutBuilder::BlockFp8(const std::string& name, const std::vector<int64_t>& shape,
                                       const std::string& scale_tensor) {
  Tensor(name, shape, "F8_E4M3");
  v1::Quantization* q = spec_.mutable_tensors(spec_.tensors_size() - 1)->mutable_quantization();
  q->set_scheme("block_fp8");
  q->set_scale_tensor(scale_tensor);
  std::vector<int64_t> blocks = shape;
  for (size_t d = shape.size() >= 2 ? shape.size() - 2 : 0; d < shape.size(); ++d) {
    blocks[d] = (shape[d] + 127) / 128;
  }
  return Tensor(scale_tensor, blocks, "F32");
}

LayoutBuilder& LayoutBuilder::CastToBf16(const std::string& name,
                                         const std::vector<int64_t>& shape) {
  Tensor(name, shape, "BF16");
  spec_.mutable_tensors(spec_.tensors_size() - 1)->mutable_quantization()->set_scheme("cast");
  return *this;
}

LayoutBuilder& LayoutBuilder::Dequantized(const std::string& name,
                                          const std::vector<int64_t>& shape,
                                          const std::string& dtype,
                                          const std::string& scale_tensor) {
  Tensor(name, shape, dtype);
  v1::Quantization* q = spec_.mutable_tensors(spec_.tensors_size() - 1)->mutable_quantization();
  q->set_scheme("dequantize");
  q->set_scale_tensor(scale_tensor);
  return *this;
}

v1::RankLayout* LayoutBuilder::FindRank(int64_t rank) {
  for (v1::RankLayout& r : *spec_.mutable_ranks()) {
    if (r.rank() == rank) return &r;
  }
  v1::RankLayout* r = spec_.add_ranks();
  r->set_rank(rank);
  r->set_host(absl::StrCat("host-", rank / 4));
  r->set_device(static_cast<int32_t>(rank % 4));
  return r;
}

const v1::TensorSpec* LayoutBuilder::FindTensor(const std::string& name) const {
  for (const v1::TensorSpec& t : spec_.tensors()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

LayoutBuilder& LayoutBuilder::Rank(int64_t rank, const std::string& host, int32_t device) {
  v1::RankLayout* r = FindRank(rank);
  if (!host.empty()) r->set_host(host);
  if (device >= 0) r->set_device(device);
  return *this;
}

LayoutBuilder& LayoutBuilder::View(int64_t rank, const std::string& tensor,
                                   const std::vector<int64_t>& offset,
                                   const std::vector<int64_t>& extent, const std::string& buffer,
                                   int64_t byte_offset, const std::vector<int64_t>& strides) {
  v1::ShardView* v = FindRank(rank)->add_views();
  v->set_tensor(tensor);
  v->mutable_offset()->Assign(offset.begin(), offset.end());
  v->mutable_extent()->Assign(extent.begin(), extent.end());
  v->set_buffer(buffer);
  v->set_byte_offset(byte_offset);
  v->mutable_strides()->Assign(strides.begin(), strides.end());
  return *this;
}

LayoutBuilder& LayoutBuilder::Buffer(int64_t rank, const std::string& name, int64_t bytes) {
  v1::BufferSpec* b = FindRank(rank)->add_buffers();
  b->set_name(name);
  b->set_bytes(bytes);
  return *this;
}

LayoutBuilder& LayoutBuilder::Chunked(const std::string& tensor, size_t dim,
                                      const std::vector<int64_t>& ranks) {
  const v1::TensorSpec* t = FindTensor(tensor);
  std::vector<int64_t> shape(t->shape().begin(), t->shape().end());
  const int64_t n = shape[dim], parts = ranks.size();
  const int64_t chunk = (n + parts - 1) / parts;
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t begin = std::min(n, i * chunk), end = std::min(n, begin + chunk);
    if (end <= begin) continue;
    std::vector<int64_t> offset(shape.size(), 0), extent = shape;
    offset[dim] = begin;
    extent[dim] = end - begin;
    View(ranks[i], tensor, offset, extent);
  }
  return *this;
}

LayoutBuilder& LayoutBuilder::Replicated(const std::string& tensor,
                                         const std::vector<int64_t>& ranks) {
  const v1::TensorSpec* t = FindTensor(tensor);
  std::vector<int64_t> shape(t->shape().begin(), t->shape().end());
  for (int64_t r : ranks) View(r, tensor, std::vector<int64_t>(shape.size(), 0), shape);
  return *this;
}

namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

const char* RandomDtype(std::mt19937_64& rng) {
  static const char* kDtypes[] = {"F32", "BF16", "F16", "U8", "F64", "I32", "F8_E4M3"};
  return kDtypes[Uniform(rng, 0, 6)];
}

int DtypeWidth(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16") return 2;
  return 1;
}

// Random sorted cut points of [0, n) into at most `parts` non-empty pieces.
std::vector<int64_t> RandomCuts(std::mt19937_64& rng, int64_t n, int64_t parts) {
  std::vector<int64_t> inner(n - 1);
  std::iota(inner.begin(), inner.end(), 1);
  std::shuffle(inner.begin(), inner.end(), rng);
  inner.resize(std::min<int64_t>(inner.size(), parts - 1));
  inner.push_back(0);
  inner.push_back(n);
  std::sort(inner.begin(), inner.end());
  return inner;
}

struct Tile {
  std::vector<int64_t> offset, extent;
};

// A random tiling of the whole tensor: uneven cuts along up to 3 dims.
std::vector<Tile> RandomTiling(std::mt19937_64& rng, const std::vector<int64_t>& shape,
                               int max_parts) {
  const size_t rank = shape.size();
  std::vector<std::vector<int64_t>> cuts(rank);
  std::vector<size_t> dims(rank);
  std::iota(dims.begin(), dims.end(), 0);
  std::shuffle(dims.begin(), dims.end(), rng);
  const size_t split_dims = Uniform(rng, 0, std::min<int64_t>(3, rank));
  for (size_t d = 0; d < rank; ++d) cuts[d] = {0, shape[d]};
  for (size_t i = 0; i < split_dims; ++i) {
    const size_t d = dims[i];
    if (shape[d] > 1) cuts[d] = RandomCuts(rng, shape[d], Uniform(rng, 2, max_parts));
  }
  std::vector<Tile> tiles = {Tile{{}, {}}};
  for (size_t d = 0; d < rank; ++d) {
    std::vector<Tile> next;
    for (const Tile& t : tiles) {
      for (size_t c = 0; c + 1 < cuts[d].size(); ++c) {
        Tile grown = t;
        grown.offset.push_back(cuts[d][c]);
        grown.extent.push_back(cuts[d][c + 1] - cuts[d][c]);
        next.push_back(grown);
      }
    }
    tiles.swap(next);
  }
  return tiles;
}

// Places views into memory: own buffers, or one fused buffer per rank with padding and
// row-major or reversed (column-major-like) strides.
void PlaceViews(std::mt19937_64& rng, const std::vector<v1::TensorSpec>& tensors,
                bool fused_buffers, v1::LayoutSpec* spec) {
  for (v1::RankLayout& rank : *spec->mutable_ranks()) {
    const int64_t mode = fused_buffers ? Uniform(rng, 0, 2) : 0;
    if (mode == 0 || rank.views().empty()) continue;
    int64_t cursor = Uniform(rng, 0, 3) * 8;
    for (v1::ShardView& view : *rank.mutable_views()) {
      int width = 1;
      for (const v1::TensorSpec& t : tensors) {
        if (t.name() == view.tensor()) width = DtypeWidth(t.dtype());
      }
      const size_t dims = view.extent_size();
      std::vector<int64_t> strides(dims, 1);
      if (mode == 1) {
        for (size_t d = dims; d-- > 1;) strides[d - 1] = strides[d] * view.extent(d);
      } else {
        for (size_t d = 0; d + 1 < dims; ++d) strides[d + 1] = strides[d] * view.extent(d);
      }
      int64_t volume = 1;
      for (int64_t e : view.extent()) volume *= e;
      view.set_buffer("fused");
      view.set_byte_offset(cursor);
      view.mutable_strides()->Assign(strides.begin(), strides.end());
      cursor += volume * width + Uniform(rng, 0, 2) * 8;
    }
    v1::BufferSpec* buffer = rank.add_buffers();
    buffer->set_name("fused");
    buffer->set_bytes(cursor + Uniform(rng, 0, 16));
  }
}

v1::LayoutSpec RandomSide(std::mt19937_64& rng, const std::vector<v1::TensorSpec>& tensors,
                          int64_t num_ranks, int64_t gpus_per_host, const RandomLayoutOptions& o) {
  v1::LayoutSpec spec;
  for (const v1::TensorSpec& t : tensors) *spec.add_tensors() = t;
  for (int64_t r = 0; r < num_ranks; ++r) {
    v1::RankLayout* rank = spec.add_ranks();
    rank->set_rank(r);
    rank->set_host(absl::StrCat("host-", r / gpus_per_host));
    rank->set_device(static_cast<int32_t>(r % gpus_per_host));
  }
  for (const v1::TensorSpec& t : tensors) {
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    const int64_t replicas = Uniform(rng, 1, 3);
    int64_t next_rank = Uniform(rng, 0, num_ranks - 1);
    for (int64_t rep = 0; rep < replicas; ++rep) {
      for (const Tile& tile : RandomTiling(rng, shape, o.max_ranks + 1)) {
        v1::ShardView* view = spec.mutable_ranks(next_rank)->add_views();
        view->set_tensor(t.name());
        view->mutable_offset()->Assign(tile.offset.begin(), tile.offset.end());
        view->mutable_extent()->Assign(tile.extent.begin(), tile.extent.end());
        next_rank = (next_rank + Uniform(rng, 1, 2)) % num_ranks;
      }
    }
  }
  PlaceViews(rng, tensors, o.fused_buffers, &spec);
  return spec;
}

}  // namespace

v1::Topology SlowLinksTopology() {
  v1::Topology topology;
  topology.set_name("slow-links");
  topology.set_nvlink_gbytes_per_s(450e-6);
  topology.set_nic_gbytes_per_s(50e-6);
  topology.set_local_copy_gbytes_per_s(1500e-6);
  topology.set_message_latency_us(1e-9);
  topology.set_batch_latency_us(1e-9);
  return topology;
}

LayoutPair RandomLayoutPair(std::mt19937_64& rng, const RandomLayoutOptions& o) {
  std::vector<v1::TensorSpec> tensors;
  const int num_tensors = Uniform(rng, 1, o.max_tensors);
  for (int i = 0; i < num_tensors; ++i) {
    v1::TensorSpec t;
    t.set_name(absl::StrCat("layer.", i, ".w"));
    t.set_dtype(RandomDtype(rng));
    const int dims = Uniform(rng, 1, 4);
    int64_t volume = 1;
    for (int d = 0; d < dims; ++d) {
      const int64_t limit = std::max<int64_t>(1, std::min<int64_t>(13, o.max_volume / volume));
      const int64_t n = Uniform(rng, 1, limit);
      volume *= n;
      t.add_shape(n);
    }
    tensors.push_back(t);
  }
  const int64_t src_ranks = Uniform(rng, 1, o.max_ranks);
  const int64_t dst_ranks = Uniform(rng, 1, o.max_ranks);
  const int64_t gpus_per_host = Uniform(rng, 1, 4);
  LayoutPair pair;
  pair.sources = RandomSide(rng, tensors, src_ranks, gpus_per_host, o);
  pair.destinations = RandomSide(rng, tensors, dst_ranks, gpus_per_host, o);
  if (!o.colocated) {
    for (v1::RankLayout& r : *pair.destinations.mutable_ranks()) r.set_host("dst-" + r.host());
  }
  pair.description = absl::StrCat(num_tensors, " tensors, ", src_ranks, " -> ", dst_ranks,
                                  " ranks, ", gpus_per_host, " GPUs per host");
  return pair;
}

LayoutPair RowsToColumnsPair() {
  LayoutBuilder src, dst;
  src.Tensor("w", {16, 12}).Tensor("norm", {12});
  dst.Tensor("w", {16, 12}).Tensor("norm", {12});
  src.Chunked("w", 0, {0, 1}).Replicated("norm", {0, 1});
  dst.Chunked("w", 1, {0, 1}).Replicated("norm", {0, 1});
  for (int r = 0; r < 2; ++r) {
    src.Rank(r, "trainer", r);
    dst.Rank(r, "inference", r);
  }
  return {src.spec(), dst.spec(), "rows of w to columns, norm replicated"};
}

}  // namespace refit::testing
