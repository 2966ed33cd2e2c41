// The bound the GPU refit is compared with: plain cudaMemcpy device to device of N bytes
// on one GPU, best of 5. Prints "cudaMemcpy D2D: BYTES bytes, X GB/s".
//   refit-gpu-memcpy-bench [BYTES] [DEVICE]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const long long bytes = argc > 1 ? std::atoll(argv[1]) : (1LL << 30);
  const int device = argc > 2 ? std::atoi(argv[2]) : 0;
  void* from = nullptr;
  void* to = nullptr;
  if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&from, bytes) != cudaSuccess ||
      cudaMalloc(&to, bytes) != cudaSuccess) {
    std::fprintf(stderr, "refit-gpu-memcpy-bench: no GPU memory: %s\n",
                 cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  cudaMemset(from, 1, bytes);
  cudaDeviceSynchronize();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds < best) best = seconds;
  }
  std::printf("cudaMemcpy D2D: %lld bytes, %.1f GB/s\n", bytes, bytes / best / 1e9);
  cudaFree(from);
  cudaFree(to);
  return 0;
}
