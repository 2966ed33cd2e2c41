// One source view sent quantized (v1::QuantizedSource, planner/quantization.h): the memory
// of its E4M3 codes and of its blocks' F32 scales (or, for a "cast", of its values rounded
// to BF16), kept across epochs, and the quantization of the rank's view into them before an
// epoch moves them. The plan reads the codes as the view itself and the scales as a view of
// the scale tensor on the same rank (BufferMap swaps both in). A view in GPU memory is
// quantized on its GPU (transport/gpu/block_quantize_device.h) into codes and scales kept
// there; a cast is host memory only.
#ifndef REFIT_TRANSPORT_QUANTIZED_VIEW_H_
#define REFIT_TRANSPORT_QUANTIZED_VIEW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/block_quantize.h"
#include "transport/buffer_map.h"
#include "transport/gpu/device_memory.h"
#include "transport/host_memory.h"

namespace refit::transport {

class QuantizedView {
 public:
  // `registered` is the view as the rank registered it (its memory holds `spec`'s source
  // dtype). INVALID_ARGUMENT naming the rank and view when they disagree, UNIMPLEMENTED or
  // FAILED_PRECONDITION for a GPU view where this build or that GPU cannot quantize,
  // RESOURCE_EXHAUSTED when the memory cannot be had.
  static absl::StatusOr<std::unique_ptr<QuantizedView>> Make(const v1::QuantizedSource& spec,
                                                             const MappedView& registered);

  // A destination view quantized on arrival (PlanSlice.quantized_on_arrival): the plan fills
  // memory kept here in the sources' dtype (wide()), and each quantization writes the rank's
  // registered `codes` view and its blocks' part of its registered `scales` view. A GPU view's
  // wide copy is kept on its GPU and quantized there (as Make's); INVALID_ARGUMENT naming the
  // rank and view when the views do not fit the spec.
  static absl::StatusOr<std::unique_ptr<QuantizedView>> MakeOnArrival(
      const v1::QuantizedSource& spec, const MappedView& codes, const MappedView& scales);

  // A destination view dequantized on arrival (scheme "dequantize"): the plan fills codes
  // and the scales of its blocks kept here (codes(), scales(), the scales read as a view the
  // plan appends), and each dequantization writes the rank's `registered` BF16 or F32 view.
  // Host memory only (UNIMPLEMENTED for a GPU view).
  static absl::StatusOr<std::unique_ptr<QuantizedView>> MakeDequantizing(
      const v1::QuantizedSource& spec, const MappedView& registered);

  const v1::QuantizedSource& spec() const { return spec_; }
  // The view in its wide dtype: what the rank registered (sent), or the memory the plan
  // fills (on arrival).
  const MappedView& wide() const { return wide_; }
  // The view quantized: its codes (BF16 values for a cast), and its blocks' scales (none for
  // a cast). Kept here when sent; the rank's own views on arrival.
  const MappedView& codes() const { return codes_; }
  bool has_scales() const { return has_scales_; }
  const MappedView& scales() const { return scales_; }
  // Bytes kept: codes and scales (sent), the wide copy (on arrival).
  int64_t bytes() const { return kept_bytes_; }

  // Bytes of wide values one quantization reads.
  int64_t SourceBytes() const {
    return matrices_ * rows_ * cols_ * (type_ == WideType::kF32 ? 4 : 2);
  }

  // The work of one quantization (or dequantization), in bands of whole block rows that
  // threads can share.
  int64_t Bands() const { return matrices_ * bands_per_matrix_; }
  absl::Status QuantizeBand(int64_t band) const;

 private:
  QuantizedView() = default;
  // "source rank R: view V of "T"" (or destination).
  static std::string WhoIs(v1::Role role, const v1::QuantizedSource& spec);
  // The checks and geometry Make and MakeOnArrival share, for `wide` as the weights (codes
  // and scales left to the caller); a cast is made whole.
  static absl::StatusOr<std::unique_ptr<QuantizedView>> MakeBlocks(const v1::QuantizedSource& spec,
                                                                   const MappedView& wide,
                                                                   const std::string& who);
  // OK when `registered` holds the spec's box; else INVALID_ARGUMENT saying the plan `verb`
  // a box the registration does not hold.
  static absl::Status CheckHeld(const v1::QuantizedSource& spec, const MappedView& registered,
                                const std::string& who, const char* verb);
  // Checks the spec's block (over the last two dims, 1 over the others; square on a GPU) and
  // sets the geometry from wide_: block, rows, columns, matrices and bands.
  absl::Status SetBlocks();
  // Codes and scales of wide_'s box kept here (on `device`; -1: host memory).
  absl::Status KeepCodesAndScales(int32_t device);
  // Make for a cast, and QuantizeBand's rows of one.
  static absl::StatusOr<std::unique_ptr<QuantizedView>> MakeCast(const v1::QuantizedSource& spec,
                                                                 const MappedView& registered,
                                                                 const std::string& who);
  absl::Status CastRows(int64_t row, int64_t rows) const;
  // QuantizeBand of a view dequantized: rows [row, row + rows) of matrix `matrix`.
  absl::Status DequantizeRows(int64_t matrix, int64_t row, int64_t rows) const;
  // The first element, in `view`, of the sub-box at row-major index `index` over the view's
  // first `leading_dims` dims.
  static int64_t LeadingElement(const MappedView& view, int64_t index, size_t leading_dims);

  v1::QuantizedSource spec_;
  std::string who_;
  MappedView wide_;
  WideType type_ = WideType::kBF16;
  bool cast_ = false;
  bool dequantize_ = false;  // codes and scales into wide_, not wide_ into them
  BlockShape block_;
  int64_t rows_ = 0, cols_ = 0;  // of each matrix: the view's last two dims
  int64_t matrices_ = 0;         // the product of the leading dims (a cast: 1, rows_ all)
  int64_t band_rows_ = 0;
  int64_t bands_per_matrix_ = 0;
  // Memory of `bytes` kept with the view, where the wide view's memory is (host or its GPU);
  // RESOURCE_EXHAUSTED naming `who`.
  absl::StatusOr<uint8_t*> Keep(int64_t bytes, const std::string& who);
  std::vector<std::unique_ptr<HostMemory>> host_memory_;
  std::vector<std::unique_ptr<gpu::DeviceMemory>> device_memory_;
  int64_t kept_bytes_ = 0;
  bool has_scales_ = false;
  MappedView codes_, scales_;
};

// Quantizes every band of `views` on up to `threads` threads (the caller's among them); the
// first failure, if any.
absl::Status QuantizeViews(const std::vector<const QuantizedView*>& views, int threads);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_QUANTIZED_VIEW_H_
