// The CUDA quantizer on a real device: random shapes (edges that cut blocks, blocks of 128
// and 1 to 9, all-zero blocks, NaN and infinities), BF16 and F32, strided weights, codes
// and scales; every code and scale equal to the reference quantizer's
// (transport/testing/reference_quantizer.h). Reported skipped, with the reason, where the
// machine has no GPU.
#include "transport/gpu/block_quantize_kernel.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "transport/block_quantize.h"
#include "transport/gpu/block_quantize_device.h"
#include "transport/gpu/gpu_support.h"
#include "transport/testing/reference_quantizer.h"

namespace refit::transport::gpu {
namespace {

// Device memory of `bytes`, freed at the end of the scope.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  void* data = nullptr;
};

TEST(BlockQuantizeKernelTest, CodesAndScalesEqualTheReference) {
  const GpuSupport support = DetectGpu();
  if (!support.available) GTEST_SKIP() << "needs a GPU: " << support.description;
  std::mt19937 rng(16);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t rows = 1 + rng() % 300, cols = 1 + rng() % 300;
    const int64_t block = trial % 3 == 0 ? 128 : 1 + rng() % 9;
    const bool bf16 = trial % 2 == 0;
    const int64_t row_pad = rng() % 5, code_pad = rng() % 3;
    const int64_t block_rows = (rows + block - 1) / block, block_cols = (cols + block - 1) / block;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << rows << " x " << cols
                                      << ", blocks of " << block << (bf16 ? ", BF16" : ", F32"));
    // Values over six decades by block row, an all-zero block row, a NaN and an infinity.
    std::vector<float> x(rows * cols);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float magnitude = std::pow(10.0f, static_cast<float>((r / block) % 6) - 3.0f);
      for (int64_t c = 0; c < cols; ++c) {
        float value = (r / block) % 7 == 4 ? 0.0f : magnitude * unit(rng);
        if (bf16) {
          const uint32_t bits = uint32_t{testing::ReferenceBf16(value)} << 16;
          std::memcpy(&value, &bits, 4);
        }
        x[r * cols + c] = value;
      }
    }
    if (trial % 5 == 1) x[rng() % x.size()] = std::numeric_limits<float>::quiet_NaN();
    if (trial % 7 == 2) x[rng() % x.size()] = -std::numeric_limits<float>::infinity();
    const int element_bytes = bf16 ? 2 : 4;
    const int64_t row_stride = cols + row_pad;
    std::vector<uint8_t> weights(rows * row_stride * element_bytes, 0xA5);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        uint32_t bits;
        std::memcpy(&bits, &x[r * cols + c], 4);
        if (bf16) bits >>= 16;
        std::memcpy(&weights[(r * row_stride + c) * element_bytes], &bits, element_bytes);
      }
    }
    DeviceBuffer device_weights(weights.size());
    DeviceBuffer device_codes(rows * (cols + code_pad));
    DeviceBuffer device_scales(block_rows * block_cols * 4);
    ASSERT_EQ(
        cudaMemcpy(device_weights.data, weights.data(), weights.size(), cudaMemcpyHostToDevice),
        cudaSuccess);
    DeviceQuantizeArgs args;
    args.weights = device_weights.data;
    args.bf16 = bf16;
    args.weight_row_stride = row_stride;
    args.codes = static_cast<uint8_t*>(device_codes.data);
    args.code_row_stride = cols + code_pad;
    args.scales = static_cast<float*>(device_scales.data);
    args.scale_row_stride = block_cols;
    args.rows = rows;
    args.cols = cols;
    args.block = block;
    ASSERT_EQ(QuantizeBlocksOnDevice(args), cudaSuccess);
    std::vector<uint8_t> codes(rows * (cols + code_pad));
    std::vector<float> scales(block_rows * block_cols);
    ASSERT_EQ(cudaMemcpy(codes.data(), device_codes.data, codes.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(
        cudaMemcpy(scales.data(), device_scales.data, scales.size() * 4, cudaMemcpyDeviceToHost),
        cudaSuccess);
    const testing::ReferenceBlocks expected = testing::ReferenceQuantize(x, rows, cols, block);
    int64_t wrong_codes = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        wrong_codes += codes[r * (cols + code_pad) + c] != expected.codes[r * cols + c];
      }
    }
    EXPECT_EQ(wrong_codes, 0);
    EXPECT_EQ(std::memcmp(scales.data(), expected.scales.data(), scales.size() * 4), 0);
  }
}

// What the data plane calls (QuantizedView, for weights held on a GPU): the device passes
// its self-check against the host quantizer, and a strided F32 box quantized through it
// equals the host's QuantizeBlocks.
TEST(BlockQuantizeKernelTest, TheDataPlanesEntryChecksItselfAndMatchesTheHost) {
  const GpuSupport support = DetectGpu();
  if (!support.available) GTEST_SKIP() << "needs a GPU: " << support.description;
  const absl::Status ready = GpuQuantizerReady(0);
  ASSERT_TRUE(ready.ok()) << ready;
  constexpr int64_t kRows = 257, kCols = 391, kStride = 400;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(-30.0f, 30.0f);
  std::vector<float> weights(kRows * kStride);
  for (float& w : weights) w = unit(rng);
  const int64_t block_rows = 3, block_cols = 4;
  std::vector<uint8_t> host_codes(kRows * kCols), device_codes(kRows * kCols);
  std::vector<float> host_scales(block_rows * block_cols), device_scales(block_rows * block_cols);
  const auto* bytes = reinterpret_cast<const uint8_t*>(weights.data());
  ASSERT_TRUE(
      QuantizeBlocks({kRows, kCols}, WideType::kF32, ConstStridedRef(bytes, {kStride, 1}),
                     StridedRef{host_codes.data(), {kCols, 1}},
                     StridedRef{reinterpret_cast<uint8_t*>(host_scales.data()), {block_cols, 1}})
          .ok());
  DeviceBuffer device_weights(weights.size() * 4);
  DeviceBuffer codes(device_codes.size());
  DeviceBuffer scales(device_scales.size() * 4);
  ASSERT_EQ(cudaMemcpy(device_weights.data, bytes, weights.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  const absl::Status quantized = QuantizeBlocksOnGpu(
      {kRows, kCols}, WideType::kF32,
      ConstStridedRef(static_cast<const uint8_t*>(device_weights.data), {kStride, 1}, 0),
      StridedRef{static_cast<uint8_t*>(codes.data), {kCols, 1}, 0},
      StridedRef{static_cast<uint8_t*>(scales.data), {block_cols, 1}, 0}, 128);
  ASSERT_TRUE(quantized.ok()) << quantized;
  ASSERT_EQ(
      cudaMemcpy(device_codes.data(), codes.data, device_codes.size(), cudaMemcpyDeviceToHost),
      cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_scales.data(), scales.data, device_scales.size() * 4,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(device_codes, host_codes);
  EXPECT_EQ(std::memcmp(device_scales.data(), host_scales.data(), host_scales.size() * 4), 0);
}

}  // namespace
}  // namespace refit::transport::gpu
