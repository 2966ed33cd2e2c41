// Quantizing pack against plain pack: the same BF16 (and F32) weight, DeepSeek-V3's
// hidden size by a TP8 slice of its dense MLP ([7168, 18432 / 8]), is either copied into a
// dense staging buffer (CopyBox, what a pack does today) or quantized into E4M3 codes and
// 128 x 128 block scales (QuantizeBlocks), alternating, best of N runs each; prints GB/s of
// weight read and the ratio. The quantized pack writes half (BF16) or a quarter (F32) of the
// bytes, which is what the network then carries.
//   bench_quantize [RUNS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "transport/block_quantize.h"
#include "transport/fp8_e4m3.h"
#include "transport/strided_copy.h"

namespace refit::transport {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Compare(WideType type, int runs) {
  const int64_t rows = 7168, cols = 2304;
  const int element_bytes = type == WideType::kF32 ? 4 : 2;
  std::vector<uint8_t> weights(rows * cols * element_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float value = normal(rng);
    if (type == WideType::kF32) {
      std::memcpy(&weights[i * 4], &value, 4);
    } else {
      const uint16_t half = FloatToBf16(value);
      std::memcpy(&weights[i * 2], &half, 2);
    }
  }
  std::vector<uint8_t> packed(weights.size(), 1), codes(rows * cols, 1);
  const int64_t block_rows = (rows + 127) / 128, block_cols = (cols + 127) / 128;
  std::vector<float> scales(block_rows * block_cols, 1.0f);
  const Dims extent{rows, cols}, dense{cols, 1};
  double copy = 1e9, quantize = 1e9;
  for (int run = 0; run < runs; ++run) {
    auto start = std::chrono::steady_clock::now();
    CopyBox(extent, element_bytes, ConstStridedRef(weights.data(), dense),
            StridedRef{packed.data(), dense});
    copy = std::min(copy, Seconds(start));
    start = std::chrono::steady_clock::now();
    const absl::Status done = QuantizeBlocks(
        extent, type, ConstStridedRef(weights.data(), dense), StridedRef{codes.data(), dense},
        StridedRef{reinterpret_cast<uint8_t*>(scales.data()), {block_cols, 1}});
    quantize = std::min(quantize, Seconds(start));
    if (!done.ok()) {
      std::fprintf(stderr, "%s\n", std::string(done.message()).c_str());
      std::exit(1);
    }
  }
  const double gb = weights.size() / 1e9;
  std::printf(
      "%-5s %6.1f MB: pack %.4f s (%.2f GB/s), quantizing pack %.4f s (%.2f GB/s): %.2fx "
      "the time, %.2fx the bytes out\n",
      type == WideType::kF32 ? "F32" : "BF16", gb * 1e3, copy, gb / copy, quantize, gb / quantize,
      quantize / copy, (codes.size() + scales.size() * 4.0) / static_cast<double>(packed.size()));
}

}  // namespace
}  // namespace refit::transport

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  refit::transport::Compare(refit::transport::WideType::kBF16, runs);
  refit::transport::Compare(refit::transport::WideType::kF32, runs);
  return 0;
}
