#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/fp8_e4m3.h"
#include "transport/gpu/block_quantize_device.h"
#include "transport/gpu/block_quantize_kernel.h"
#include "transport/gpu/cuda_checks.h"
#include "transport/gpu/device_memory.h"

namespace refit::transport::gpu {
namespace {

absl::Status Launch(const Dims& extent, WideType type, const ConstStridedRef& weights,
                    const StridedRef& codes, const StridedRef& scales, int64_t block) {
  if (extent.size() != 2 || weights.strides.size() != 2 || codes.strides.size() != 2 ||
      scales.strides.size() != 2 || block <= 0) {
    return absl::InvalidArgumentError("the GPU quantizer takes 2-D boxes and a positive block");
  }
  if (absl::Status set = CudaStatus(cudaSetDevice(weights.device), "cudaSetDevice"); !set.ok()) {
    return set;
  }
  DeviceQuantizeArgs args;
  args.weights = weights.base;
  args.bf16 = type == WideType::kBF16;
  args.weight_row_stride = weights.strides[0];
  args.weight_col_stride = weights.strides[1];
  args.codes = codes.base;
  args.code_row_stride = codes.strides[0];
  args.code_col_stride = codes.strides[1];
  args.scales = reinterpret_cast<float*>(scales.base);
  args.scale_row_stride = scales.strides[0];
  args.scale_col_stride = scales.strides[1];
  args.rows = extent[0];
  args.cols = extent[1];
  args.block = block;
  return CudaStatus(
      static_cast<cudaError_t>(QuantizeBlocksOnDevice(args)),
      absl::StrCat("quantizing a ", extent[0], " x ", extent[1], " box on GPU ", weights.device));
}

// A random BF16 weight over six decades with an all-zero block, quantized on `device` and
// on the host: OK when every code and scale agree.
absl::Status SelfCheck(int32_t device) {
  constexpr int64_t kRows = 300, kCols = 260, kBlock = 128;
  std::mt19937 rng(448);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<uint16_t> weights(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const float magnitude =
          (r / kBlock == 2 && c < kBlock) ? 0.0f : std::pow(10.0f, r % 6 - 3.0f);
      weights[r * kCols + c] = FloatToBf16(magnitude * unit(rng));
    }
  }
  const int64_t scale_count = 3 * 3;
  std::vector<uint8_t> host_codes(kRows * kCols), device_codes(kRows * kCols);
  std::vector<float> host_scales(scale_count), device_scales(scale_count);
  absl::Status host =
      QuantizeBlocks({kRows, kCols}, WideType::kBF16,
                     ConstStridedRef(reinterpret_cast<const uint8_t*>(weights.data()), {kCols, 1}),
                     StridedRef{host_codes.data(), {kCols, 1}},
                     StridedRef{reinterpret_cast<uint8_t*>(host_scales.data()), {3, 1}}, kBlock);
  if (!host.ok()) return host;
  absl::StatusOr<std::unique_ptr<DeviceMemory>> memory =
      DeviceMemory::Allocate(weights.size() * 2 + host_codes.size() + scale_count * 4, device);
  if (!memory.ok()) return memory.status();
  uint8_t* on_device = (*memory)->data();
  uint8_t* codes = on_device + weights.size() * 2;
  uint8_t* scales = codes + host_codes.size();
  absl::Status status =
      CudaStatus(cudaMemcpy(on_device, weights.data(), weights.size() * 2, cudaMemcpyHostToDevice),
                 "cudaMemcpy");
  if (status.ok()) {
    status =
        Launch({kRows, kCols}, WideType::kBF16, ConstStridedRef(on_device, {kCols, 1}, device),
               StridedRef{codes, {kCols, 1}, device}, StridedRef{scales, {3, 1}, device}, kBlock);
  }
  if (status.ok()) {
    status = CudaStatus(
        cudaMemcpy(device_codes.data(), codes, device_codes.size(), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  }
  if (status.ok()) {
    status = CudaStatus(
        cudaMemcpy(device_scales.data(), scales, scale_count * 4, cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  }
  if (!status.ok()) return status;
  if (device_codes != host_codes ||
      std::memcmp(device_scales.data(), host_scales.data(), scale_count * 4) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", device,
                     "'s quantizer disagrees with the host's on its self-check: weights "
                     "held in its memory are not quantized"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GpuQuantizerReady(int32_t device) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* checked = new std::map<int32_t, absl::Status>();
  absl::MutexLock lock(&mu);
  auto it = checked->find(device);
  if (it == checked->end()) it = checked->emplace(device, SelfCheck(device)).first;
  return it->second;
}

absl::Status QuantizeBlocksOnGpu(const Dims& extent, WideType type, const ConstStridedRef& weights,
                                 const StridedRef& codes, const StridedRef& scales, int64_t block) {
  if (absl::Status ready = GpuQuantizerReady(weights.device); !ready.ok()) return ready;
  return Launch(extent, type, weights, codes, scales, block);
}

}  // namespace refit::transport::gpu
