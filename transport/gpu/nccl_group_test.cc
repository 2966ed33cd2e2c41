// NCCL through the real backend on one GPU: a single-rank communicator sends a strided
// piece, packed on the copy engines, to itself; the unpacked result matches the reference.
// Joining with a wrong id is refused. Reported skipped, with the reason, without a GPU.
#include "transport/gpu/nccl_group.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "transport/gpu/device_copy.h"
#include "transport/gpu/gpu_support.h"
#include "transport/testing/strided_reference.h"

#ifdef REFIT_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace refit::transport::gpu {
namespace {

TEST(NcclGroupTest, ABadUniqueIdIsRefused) {
  EXPECT_FALSE(NcclGroup::Join("short", 1, {{0, 0}}, absl::Now() + absl::Seconds(1)).ok());
}

TEST(NcclGroupTest, OneRankSendsAStridedPieceToItself) {
  const GpuSupport support = DetectGpu();
  if (!support.available) GTEST_SKIP() << "needs a GPU: " << support.description;
#ifdef REFIT_HAS_CUDA
  absl::StatusOr<std::string> id = NcclGroup::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<NcclGroup>> comm =
      NcclGroup::Join(*id, 1, {{0, 0}}, absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(comm.ok()) << comm.status();
  // A [64, 48] column block of a [64, 256] bf16 matrix: pack, send, receive, unpack.
  const Dims extent = {64, 48};
  const Dims source_strides = {256, 1};
  const Dims dense = RowMajorStrides(extent);
  const int eb = 2;
  std::mt19937 rng(1);
  std::vector<uint8_t> host(64 * 256 * eb);
  for (uint8_t& b : host) b = rng();
  void* matrix = nullptr;
  void* packed = nullptr;
  void* received = nullptr;
  const size_t piece = 64 * 48 * eb;
  ASSERT_EQ(cudaMalloc(&matrix, host.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&packed, piece), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&received, piece), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(matrix, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  const uint8_t* column = static_cast<uint8_t*>(matrix) + 100 * eb;
  ASSERT_TRUE(CopyAnyBox(extent, eb, StridedRef{const_cast<uint8_t*>(column), source_strides, 0},
                         StridedRef{static_cast<uint8_t*>(packed), dense, 0})
                  .ok());
  const absl::Status sent = (*comm)->RunStep({{0, true, 0, packed, static_cast<int64_t>(piece)},
                                              {0, false, 0, received, static_cast<int64_t>(piece)}},
                                             absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(sent.ok()) << sent;
  std::vector<uint8_t> got(piece), expected(piece);
  ASSERT_EQ(cudaMemcpy(got.data(), received, piece, cudaMemcpyDeviceToHost), cudaSuccess);
  transport::testing::ReferenceCopy(extent, eb, host.data() + 100 * eb, source_strides,
                                    expected.data(), dense);
  EXPECT_EQ(got, expected);
  cudaFree(matrix);
  cudaFree(packed);
  cudaFree(received);
#endif
}

}  // namespace
}  // namespace refit::transport::gpu
