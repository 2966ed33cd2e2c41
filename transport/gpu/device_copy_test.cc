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

}  // namespace
}  // namespace refit::transport::gpu
