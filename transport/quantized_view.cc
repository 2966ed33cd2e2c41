#include "transport/quantized_view.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "planner/box.h"
#include "transport/fp8_e4m3.h"
#include "transport/gpu/block_quantize_device.h"
#include "transport/gpu/device_memory.h"
#include "transport/memory_fault_guard.h"
#include "transport/rank_key.h"

namespace refit::transport {
namespace {

// Rows of one band: whole blocks, about 1 MiB of source elements, so that a few large views
// still spread over the threads.
int64_t BandRows(int64_t block, int64_t cols, int element_bytes) {
  const int64_t rows = (int64_t{1} << 20) / std::max<int64_t>(1, cols * element_bytes);
  return block * std::max<int64_t>(1, rows / block);
}

// Bytes an element of the weights to quantize takes: BF16 2, F32 4; 0 for anything else.
int WideBytesOf(const std::string& source_dtype) {
  return source_dtype == "BF16" ? 2 : source_dtype == "F32" ? 4 : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<QuantizedView>> QuantizedView::Make(const v1::QuantizedSource& spec,
                                                                   const MappedView& registered) {
  absl::StatusOr<std::unique_ptr<QuantizedView>> view =
      MakeBlocks(spec, registered, WhoIs(v1::ROLE_SOURCE, spec));
  if (!view.ok() || (*view)->cast_) return view;
  if (absl::Status kept = (*view)->KeepCodesAndScales(registered.device); !kept.ok()) return kept;
  return view;
}

absl::StatusOr<std::unique_ptr<QuantizedView>> QuantizedView::MakeOnArrival(
    const v1::QuantizedSource& spec, const MappedView& codes, const MappedView& scales) {
  const std::string who = WhoIs(v1::ROLE_DESTINATION, spec);
  const Dims block(spec.block().begin(), spec.block().end());
  if (spec.scheme() == "cast" || codes.element_bytes != 1) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": quantized on arrival, but it holds ",
                                                   codes.element_bytes,
                                                   "-byte elements, not block-scaled FP8 codes"));
  }
  if (codes.device != scales.device) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": its codes and the view of its scales are not on one device (",
                     codes.device, " and ", scales.device, "; -1 is host memory)"));
  }
  const int wide_bytes = WideBytesOf(spec.source_dtype());
  if (wide_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": quantized on arrival from ",
                                                   spec.source_dtype(), ", not BF16 or F32"));
  }
  const planner::Box box{codes.offset, codes.extent};
  const planner::Box blocks = planner::BlocksOf(box, block);
  if (scales.tensor != spec.scale_tensor() || scales.element_bytes != 4 ||
      scales.offset.size() != blocks.rank() ||
      !planner::Contains(planner::Box{scales.offset, scales.extent}, blocks)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": view ", spec.scale_view(),
                     " of the rank does not hold the F32 scales of its blocks ",
                     planner::FormatBox(blocks), " in \"", spec.scale_tensor(), "\""));
  }
  // The memory the plan fills in the sources' dtype: a dense box of its own, where the
  // codes are (host memory, or their GPU: quantized there by the CUDA quantizer).
  MappedView wide{spec.tensor(), codes.offset, codes.extent, RowMajorStrides(codes.extent),
                  wide_bytes,    nullptr,      codes.device};
  absl::StatusOr<std::unique_ptr<QuantizedView>> view = MakeBlocks(spec, wide, who);
  if (!view.ok()) return view;
  QuantizedView& made = **view;
  absl::StatusOr<uint8_t*> memory = made.Keep(box.Volume() * wide_bytes, who);
  if (!memory.ok()) return memory.status();
  made.wide_.base = *memory;
  made.codes_ = codes;
  // The scale view narrowed to the view's blocks.
  int64_t element = 0;
  for (size_t d = 0; d < blocks.rank(); ++d) {
    element += (blocks.offset[d] - scales.offset[d]) * scales.strides[d];
  }
  made.scales_ =
      MappedView{spec.scale_tensor(),       blocks.offset, blocks.extent, scales.strides, 4,
                 scales.base + element * 4, scales.device};
  return view;
}

absl::StatusOr<std::unique_ptr<QuantizedView>> QuantizedView::MakeDequantizing(
    const v1::QuantizedSource& spec, const MappedView& registered) {
  const std::string who = WhoIs(v1::ROLE_DESTINATION, spec);
  if (absl::Status held = CheckHeld(spec, registered, who, "dequantizes"); !held.ok()) return held;
  if (registered.element_bytes != 2 && registered.element_bytes != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " holds ", registered.element_bytes,
                     "-byte elements; dequantizing gives BF16 or F32"));
  }
  if (registered.device >= 0) {
    return absl::UnimplementedError(
        absl::StrCat(who, " is in GPU memory: dequantizing on the GPU is not built yet"));
  }
  auto view = std::unique_ptr<QuantizedView>(new QuantizedView());
  view->spec_ = spec;
  view->who_ = who;
  view->wide_ = registered;
  view->dequantize_ = true;
  view->type_ = registered.element_bytes == 2 ? WideType::kBF16 : WideType::kF32;
  if (absl::Status set = view->SetBlocks(); !set.ok()) return set;
  if (absl::Status kept = view->KeepCodesAndScales(-1); !kept.ok()) return kept;
  return view;
}

absl::Status QuantizedView::DequantizeRows(int64_t matrix, int64_t row, int64_t rows) const {
  const size_t dims = wide_.extent.size();
  // Where the band starts in the tensor, and so in its first block.
  const int64_t first_row = wide_.offset[dims - 2] + row;
  const int64_t first_col = wide_.offset[dims - 1];
  const int64_t block_row = first_row / block_.rows - scales_.offset[dims - 2];
  auto at = [&](const MappedView& view, int64_t view_row) {
    return view.base +
           (LeadingElement(view, matrix, dims - 2) + view_row * view.strides[dims - 2]) *
               int64_t{view.element_bytes};
  };
  auto last_two = [&](const MappedView& view) {
    return Dims{view.strides[dims - 2], view.strides[dims - 1]};
  };
  return DequantizeBlocks({rows, cols_}, {first_row % block_.rows, first_col % block_.cols},
                          ConstStridedRef(at(codes_, row), last_two(codes_), -1),
                          ConstStridedRef(at(scales_, block_row), last_two(scales_), -1), type_,
                          StridedRef{at(wide_, row), last_two(wide_), -1}, block_);
}

std::string QuantizedView::WhoIs(v1::Role role, const v1::QuantizedSource& spec) {
  return absl::StrCat(RankName(role, spec.rank()), ": view ", spec.view(), " of \"", spec.tensor(),
                      "\"");
}

absl::StatusOr<std::unique_ptr<QuantizedView>> QuantizedView::MakeBlocks(
    const v1::QuantizedSource& spec, const MappedView& registered, const std::string& who) {
  if (absl::Status held = CheckHeld(spec, registered, who, "quantizes"); !held.ok()) return held;
  if (spec.scheme() == "cast") return MakeCast(spec, registered, who);
  const int wide_bytes = WideBytesOf(spec.source_dtype());
  if (wide_bytes == 0 || registered.element_bytes != wide_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(who, " holds ", registered.element_bytes,
                                                   "-byte elements; the plan quantizes it from ",
                                                   spec.source_dtype()));
  }
  if (registered.device >= 0) {  // the CUDA quantizer, once it agreed with the host's
    if (absl::Status ready = gpu::GpuQuantizerReady(registered.device); !ready.ok()) {
      return absl::Status(ready.code(), absl::StrCat(who, " is in GPU memory: ", ready.message()));
    }
  }
  auto view = std::unique_ptr<QuantizedView>(new QuantizedView());
  view->spec_ = spec;
  view->who_ = who;
  view->wide_ = registered;
  view->type_ = wide_bytes == 2 ? WideType::kBF16 : WideType::kF32;
  if (absl::Status set = view->SetBlocks(); !set.ok()) return set;
  return view;
}

absl::Status QuantizedView::CheckHeld(const v1::QuantizedSource& spec, const MappedView& registered,
                                      const std::string& who, const char* verb) {
  if (registered.tensor == spec.tensor() &&
      std::equal(registered.offset.begin(), registered.offset.end(), spec.offset().begin(),
                 spec.offset().end()) &&
      std::equal(registered.extent.begin(), registered.extent.end(), spec.extent().begin(),
                 spec.extent().end())) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": the plan ", verb,
                   " a box this daemon's registration of the view does not hold (registered "
                   "again since the plan was made?)"));
}

absl::Status QuantizedView::SetBlocks() {
  const Dims& extent = wide_.extent;
  const Dims block(spec_.block().begin(), spec_.block().end());
  const size_t dims = extent.size();
  if (dims < 2 || block.size() != dims || block[dims - 1] <= 0 || block[dims - 2] <= 0 ||
      std::any_of(block.begin(), block.end() - 2, [](int64_t b) { return b != 1; })) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_,
                     ": quantization blocks must span the last two of two or more dims, 1 "
                     "over the others"));
  }
  block_ = BlockShape{block[dims - 2], block[dims - 1]};
  if (!ScaleRuleOf(spec_.recipe(), &block_.rule)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_, ": quantization recipe \"", spec_.recipe(), "\" is not known"));
  }
  if (wide_.device >= 0 && (block_.rows != block_.cols || block_.rule != ScaleRule::kDeepGemm)) {
    return absl::UnimplementedError(absl::StrCat(
        who_,
        " is in GPU memory: the CUDA quantizer takes square blocks and DeepGEMM's recipe, "
        "not ",
        block_.rows, " x ", block_.cols, " blocks by \"", spec_.recipe(), "\""));
  }
  rows_ = extent[dims - 2];
  cols_ = extent[dims - 1];
  matrices_ = 1;
  for (size_t d = 0; d + 2 < dims; ++d) matrices_ *= extent[d];
  // On a GPU one launch a matrix: the kernel spreads its blocks.
  band_rows_ = wide_.device >= 0 ? std::max<int64_t>(rows_, 1)
                                 : BandRows(block_.rows, cols_, wide_.element_bytes);
  bands_per_matrix_ = (rows_ + band_rows_ - 1) / band_rows_;
  has_scales_ = true;
  return absl::OkStatus();
}

absl::Status QuantizedView::KeepCodesAndScales(int32_t device) {
  const planner::Box box{wide_.offset, wide_.extent};
  const planner::Box blocks =
      planner::BlocksOf(box, Dims(spec_.block().begin(), spec_.block().end()));
  absl::StatusOr<uint8_t*> codes = Keep(box.Volume(), who_);
  if (!codes.ok()) return codes.status();
  absl::StatusOr<uint8_t*> scales = Keep(blocks.Volume() * 4, who_);
  if (!scales.ok()) return scales.status();
  codes_ = MappedView{spec_.tensor(), box.offset, box.extent, RowMajorStrides(box.extent), 1,
                      *codes,         device};
  scales_ = MappedView{spec_.scale_tensor(),
                       blocks.offset,
                       blocks.extent,
                       RowMajorStrides(blocks.extent),
                       4,
                       *scales,
                       device};
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<QuantizedView>> QuantizedView::MakeCast(
    const v1::QuantizedSource& spec, const MappedView& registered, const std::string& who) {
  if (spec.source_dtype() != "F32" || registered.element_bytes != 4) {
    return absl::InvalidArgumentError(absl::StrCat(who, " holds ", registered.element_bytes,
                                                   "-byte elements; a cast rounds F32 to BF16"));
  }
  if (registered.device >= 0) {
    return absl::UnimplementedError(
        absl::StrCat(who, " is in GPU memory: casting on the GPU is not built yet"));
  }
  auto view = std::unique_ptr<QuantizedView>(new QuantizedView());
  view->spec_ = spec;
  view->wide_ = registered;
  view->cast_ = true;
  view->who_ = who;
  view->type_ = WideType::kF32;
  view->cols_ = registered.extent.empty() ? 1 : registered.extent.back();
  view->rows_ = 1;
  for (size_t d = 0; d + 1 < registered.extent.size(); ++d) view->rows_ *= registered.extent[d];
  view->matrices_ = 1;
  view->band_rows_ = BandRows(/*block=*/1, view->cols_, /*element_bytes=*/4);
  view->bands_per_matrix_ = (view->rows_ + view->band_rows_ - 1) / view->band_rows_;
  absl::StatusOr<uint8_t*> values = view->Keep(view->rows_ * view->cols_ * 2, who);
  if (!values.ok()) return values.status();
  view->codes_ = MappedView{spec.tensor(),
                            registered.offset,
                            registered.extent,
                            RowMajorStrides(registered.extent),
                            2,
                            *values,
                            -1};
  return view;
}

absl::Status QuantizedView::CastRows(int64_t row, int64_t rows) const {
  const size_t dims = wide_.extent.size();
  const int64_t step = dims == 0 ? 1 : wide_.strides[dims - 1];
  for (int64_t r = row; r < row + rows; ++r) {
    const uint8_t* from = wide_.base + LeadingElement(wide_, r, dims == 0 ? 0 : dims - 1) * 4;
    uint8_t* to = codes_.base + r * cols_ * 2;
    for (int64_t c = 0; c < cols_; ++c) {
      float x;
      std::memcpy(&x, from + c * step * 4, 4);
      const uint16_t bits = FloatToBf16(x);
      std::memcpy(to + c * 2, &bits, 2);
    }
  }
  return absl::OkStatus();
}

int64_t QuantizedView::LeadingElement(const MappedView& view, int64_t index, size_t leading_dims) {
  int64_t element = 0;
  for (int64_t rest = index, d = static_cast<int64_t>(leading_dims) - 1; d >= 0; --d) {
    element += (rest % view.extent[d]) * view.strides[d];
    rest /= view.extent[d];
  }
  return element;
}

absl::StatusOr<uint8_t*> QuantizedView::Keep(int64_t bytes, const std::string& who) {
  kept_bytes_ += bytes;
  bytes = std::max<int64_t>(bytes, 1);
  if (wide_.device >= 0) {
    absl::StatusOr<std::unique_ptr<gpu::DeviceMemory>> memory =
        gpu::DeviceMemory::Allocate(bytes, wide_.device);
    if (!memory.ok()) {
      return absl::Status(memory.status().code(),
                          absl::StrCat(who, ": quantized copy: ", memory.status().message()));
    }
    device_memory_.push_back(*std::move(memory));
    return device_memory_.back()->data();
  }
  absl::StatusOr<std::unique_ptr<HostMemory>> memory =
      HostMemory::Allocate(bytes, HostMemory::Backing::kPrefaulted);
  if (!memory.ok()) {
    return absl::Status(memory.status().code(),
                        absl::StrCat(who, ": quantized copy: ", memory.status().message()));
  }
  host_memory_.push_back(*std::move(memory));
  return host_memory_.back()->data();
}

absl::Status QuantizedView::QuantizeBand(int64_t band) const {
  if (cast_) {
    const int64_t row = band * band_rows_;
    absl::Status cast;
    absl::Status guarded = GuardMemoryAccess(absl::StrCat("casting ", who_), [&] {
      cast = CastRows(row, std::min(band_rows_, rows_ - row));
    });
    return guarded.ok() ? cast : guarded;
  }
  const int64_t matrix = band / bands_per_matrix_;
  const int64_t row = (band % bands_per_matrix_) * band_rows_;
  const int64_t rows = std::min(band_rows_, rows_ - row);
  if (dequantize_) {
    absl::Status dequantized;
    absl::Status guarded = GuardMemoryAccess(absl::StrCat("dequantizing ", who_), [&] {
      dequantized = DequantizeRows(matrix, row, rows);
    });
    return guarded.ok() ? dequantized : guarded;
  }
  const size_t dims = wide_.extent.size();
  // The band's first row in the weights, the codes and the scales (each through its strides:
  // on arrival the codes and scales are the rank's registered views).
  auto first = [&](const MappedView& view, int64_t band_row) {
    return view.base +
           (LeadingElement(view, matrix, dims - 2) + band_row * view.strides[dims - 2]) *
               int64_t{view.element_bytes};
  };
  auto last_two = [&](const MappedView& view) {
    return Dims{view.strides[dims - 2], view.strides[dims - 1]};
  };
  const int32_t device = wide_.device;  // codes and scales are kept beside the weights
  const ConstStridedRef weights(first(wide_, row), last_two(wide_), device);
  const StridedRef codes{first(codes_, row), last_two(codes_), device};
  const StridedRef scales{first(scales_, row / block_.rows), last_two(scales_), device};
  if (wide_.device >= 0) {  // GPU memory: no host fault to guard
    return gpu::QuantizeBlocksOnGpu({rows, cols_}, type_, weights, codes, scales, block_.rows);
  }
  absl::Status quantized;
  absl::Status guarded = GuardMemoryAccess(absl::StrCat("quantizing ", who_), [&] {
    quantized = QuantizeBlocks({rows, cols_}, type_, weights, codes, scales, block_);
  });
  return guarded.ok() ? quantized : guarded;
}

absl::Status QuantizeViews(const std::vector<const QuantizedView*>& views, int threads) {
  std::vector<std::pair<const QuantizedView*, int64_t>> bands;
  for (const QuantizedView* view : views) {
    for (int64_t b = 0; b < view->Bands(); ++b) bands.emplace_back(view, b);
  }
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first_failure;
  auto work = [&]() {
    for (size_t i = next++; i < bands.size(); i = next++) {
      absl::Status done = bands[i].first->QuantizeBand(bands[i].second);
      if (!done.ok()) {
        absl::MutexLock lock(&mu);
        if (first_failure.ok()) first_failure = done;
        next = bands.size();
      }
    }
  };
  std::vector<std::thread> helpers;
  const int64_t helper_count =
      std::min<int64_t>(std::max(threads, 1) - 1, static_cast<int64_t>(bands.size()) - 1);
  for (int64_t t = 0; t < helper_count; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
  return first_failure;
}

}  // namespace refit::transport
