// What DetectGpu says matches what the build and the machine have; on a machine without a
// GPU the GPU tests that need one say so and are skipped.
#include "transport/gpu/gpu_support.h"

#include "gtest/gtest.h"

namespace refit::transport::gpu {
namespace {

TEST(GpuSupportTest, DescribesTheBuildAndTheMachine) {
  const GpuSupport support = DetectGpu();
  EXPECT_FALSE(support.description.empty());
  if (!support.built) {
    EXPECT_FALSE(support.available);
    EXPECT_NE(support.description.find("built without CUDA"), std::string::npos);
    return;
  }
  EXPECT_NE(support.description.find("NCCL "), std::string::npos) << support.description;
  if (!support.available) {
    EXPECT_EQ(support.devices, 0);
    EXPECT_EQ(support.description.rfind("no GPU: ", 0), 0u) << support.description;
    GTEST_SKIP() << "no GPU on this machine: " << support.description;
  }
  EXPECT_GT(support.devices, 0);
}

}  // namespace
}  // namespace refit::transport::gpu
