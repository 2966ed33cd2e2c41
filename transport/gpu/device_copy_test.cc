// GPU copies on a real device: random strided boxes host to device, device to device and
// device to host through CopyAnyBox, compared with the byte-by-byte reference. Reported
// skipped, with the reason, where the build has no CUDA or the machine no GPU.
#include "transport/gpu/device_copy.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "transport/gpu/gpu_support.h"
#include "transport/testing/strided_reference.h"

#ifdef REFIT_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace refit::transport::gpu {
namespace {

using transport::testing::RandomStrides;
using transport::testing::ReferenceCopy;
using transport::testing::Span;

TEST(DeviceCopyTest, StridedBoxesThroughTheGpuMatchTheReference) {
  const GpuSupport support = DetectGpu();
  if (!support.available) GTEST_SKIP() << "needs a GPU: " << support.description;
#ifdef REFIT_HAS_CUDA
  std::mt19937 rng(9);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t rank = 1 + rng() % 4;
    Dims extent;
    for (size_t d = 0; d < rank; ++d) extent.push_back(1 + rng() % 7);
    const int eb = 1 << (rng() % 3);
    const Dims host_strides = RandomStrides(rng, extent);
    const Dims device_strides = RandomStrides(rng, extent);
    const Dims back_strides = RandomStrides(rng, extent);
    std::vector<uint8_t> src(Span(extent, host_strides) * eb);
    for (uint8_t& b : src) b = rng();
    const size_t device_bytes = Span(extent, device_strides) * eb;
    void* first_memory = nullptr;
    void* second_memory = nullptr;
    ASSERT_EQ(cudaMalloc(&first_memory, device_bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&second_memory, device_bytes), cudaSuccess);
    auto* first = static_cast<uint8_t*>(first_memory);
    auto* second = static_cast<uint8_t*>(second_memory);
    // Host -> device (strided both sides) -> device -> host, then against the reference.
    std::vector<uint8_t> back(Span(extent, back_strides) * eb, 0xA5), expected = back;
    ASSERT_TRUE(CopyAnyBox(extent, eb, StridedRef{src.data(), host_strides},
                           StridedRef{first, device_strides, 0})
                    .ok());
    ASSERT_TRUE(CopyAnyBox(extent, eb, StridedRef{first, device_strides, 0},
                           StridedRef{second, device_strides, 0})
                    .ok());
    ASSERT_TRUE(CopyAnyBox(extent, eb, StridedRef{second, device_strides, 0},
                           StridedRef{back.data(), back_strides})
                    .ok());
    ReferenceCopy(extent, eb, src.data(), host_strides, expected.data(), back_strides);
    EXPECT_EQ(back, expected) << "trial " << trial;
    cudaFree(first);
    cudaFree(second);
  }
#endif
}

// Many boxes issued on one chain and waited for once: each copy reads what the one before
// it wrote (host -> device -> device -> host, 200 boxes deep), so a chain that let a copy
// run before the one it follows would return stale bytes.
TEST(DeviceCopyTest, AChainRunsItsCopiesInOrderAndWaitsOnce) {
  const GpuSupport support = DetectGpu();
  if (!support.available) GTEST_SKIP() << "needs a GPU: " << support.description;
#ifdef REFIT_HAS_CUDA
  std::mt19937 rng(11);
  const Dims extent = {64, 48};
  const int eb = 2;
  const Dims dense = RowMajorStrides(extent);
  const size_t bytes = Span(extent, dense) * eb;
  constexpr int kBoxes = 200;
  std::vector<std::vector<uint8_t>> sources(kBoxes, std::vector<uint8_t>(bytes));
  std::vector<std::vector<uint8_t>> backs(kBoxes, std::vector<uint8_t>(bytes, 0));
  void* memory = nullptr;
  ASSERT_EQ(cudaMalloc(&memory, 2 * bytes * kBoxes), cudaSuccess);
  auto* device = static_cast<uint8_t*>(memory);
  DeviceCopyChain chain;
  for (int b = 0; b < kBoxes; ++b) {
    for (uint8_t& x : sources[b]) x = rng();
    uint8_t* first = device + 2 * bytes * b;
    uint8_t* second = first + bytes;
    ASSERT_TRUE(
        chain.Copy(extent, eb, StridedRef{sources[b].data(), dense}, StridedRef{first, dense, 0})
            .ok());
    ASSERT_TRUE(
        chain.Copy(extent, eb, StridedRef{first, dense, 0}, StridedRef{second, dense, 0}).ok());
    ASSERT_TRUE(
        chain.Copy(extent, eb, StridedRef{second, dense, 0}, StridedRef{backs[b].data(), dense})
            .ok());
  }
  ASSERT_TRUE(chain.Wait().ok());
  for (int b = 0; b < kBoxes; ++b) EXPECT_EQ(backs[b], sources[b]) << "box " << b;
  cudaFree(memory);
#endif
}

}  // namespace
}  // namespace refit::transport::gpu
