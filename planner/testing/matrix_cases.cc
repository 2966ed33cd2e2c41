#include "planner/testing/matrix_cases.h"

#include <algorithm>

namespace refit::testing {
namespace {

std::vector<int64_t> Ranks(int64_t n, int64_t first = 0) {
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < n; ++r) ranks.push_back(first + r);
  return ranks;
}

// Places ranks of one side on hosts of `per_host` GPUs named with `prefix`.
void Hosts(LayoutBuilder* b, int64_t ranks, int64_t per_host, const std::string& prefix) {
  for (int64_t r = 0; r < ranks; ++r) {
    b->Rank(r, prefix + std::to_string(r / per_host), static_cast<int32_t>(r % per_host));
  }
}

// A 2-D mesh: rows split `rows` ways, columns `cols` ways, ranks row-major.
void Mesh(LayoutBuilder* b, const std::string& tensor, int64_t h, int64_t w, int64_t rows,
          int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t r0 = i * ((h + rows - 1) / rows), c0 = j * ((w + cols - 1) / cols);
      const int64_t r1 = std::min(h, r0 + (h + rows - 1) / rows);
      const int64_t c1 = std::min(w, c0 + (w + cols - 1) / cols);
      if (r1 > r0 && c1 > c0) b->View(i * cols + j, tensor, {r0, c0}, {r1 - r0, c1 - c0});
    }
  }
}

}  // namespace

std::vector<MatrixCase> MatrixCases() {
  return {
      {"full_replication",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 4, 2, "t");
         Hosts(d, 6, 3, "i");
         s->Tensor("w", {33, 17}).Replicated("w", Ranks(4));
         d->Tensor("w", {33, 17}).Replicated("w", Ranks(6));
       }},
      {"full_sharding",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 8, 4, "t");
         Hosts(d, 8, 4, "i");
         s->Tensor("w", {64, 48}, "BF16").Chunked("w", 0, Ranks(8));
         d->Tensor("w", {64, 48}, "BF16").Chunked("w", 0, Ranks(8));
       }},
      {"mesh_2d_to_mesh_2d",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 6, 2, "t");
         Hosts(d, 6, 3, "i");
         s->Tensor("w", {30, 40});
         d->Tensor("w", {30, 40});
         Mesh(s, "w", 30, 40, 2, 3);
         Mesh(d, "w", 30, 40, 3, 2);
       }},
      {"ratio_3_to_1",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 3, 3, "t");
         Hosts(d, 1, 1, "i");
         s->Tensor("w", {31, 5}).Chunked("w", 0, Ranks(3));
         d->Tensor("w", {31, 5}).Chunked("w", 0, Ranks(1));
       }},
      {"ratio_1_to_3",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 1, 1, "t");
         Hosts(d, 3, 3, "i");
         s->Tensor("w", {31, 5}).Chunked("w", 0, Ranks(1));
         d->Tensor("w", {31, 5}).Chunked("w", 0, Ranks(3));
       }},
      {"ratio_5_to_7",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 5, 2, "t");
         Hosts(d, 7, 4, "i");
         s->Tensor("w", {71, 9}, "F16").Chunked("w", 0, Ranks(5));
         d->Tensor("w", {71, 9}, "F16").Chunked("w", 0, Ranks(7));
       }},
      {"tensor_3d_experts",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         // EP along dim 0 to TP inside every expert along dim 1.
         Hosts(s, 4, 2, "t");
         Hosts(d, 4, 4, "i");
         s->Tensor("experts", {8, 12, 10}, "BF16").Chunked("experts", 0, Ranks(4));
         d->Tensor("experts", {8, 12, 10}, "BF16").Chunked("experts", 1, Ranks(4));
       }},
      {"tensor_4d",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 3, 3, "t");
         Hosts(d, 2, 2, "i");
         s->Tensor("conv", {4, 6, 5, 7}).Chunked("conv", 3, Ranks(3));
         d->Tensor("conv", {4, 6, 5, 7}).Chunked("conv", 1, Ranks(2));
       }},
      {"cross_dim_0_to_1",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 4, 4, "t");
         Hosts(d, 4, 2, "i");
         s->Tensor("w", {40, 24}).Chunked("w", 0, Ranks(4));
         d->Tensor("w", {40, 24}).Chunked("w", 1, Ranks(4));
       }},
      {"tiny_contributions",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         // Sources cut in single rows: every destination gets many one-row pieces.
         Hosts(s, 16, 8, "t");
         Hosts(d, 2, 2, "i");
         s->Tensor("w", {16, 3}).Chunked("w", 0, Ranks(16));
         d->Tensor("w", {16, 3}).Chunked("w", 1, Ranks(2));
       }},
      {"fused_gate_up",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         // Trainers hold gate and up in one [2*mi, h] buffer; inference holds them
         // interleaved side by side as the two halves of a [mi, 2*h] row-major buffer.
         const int64_t mi = 6, h = 4;
         Hosts(s, 2, 2, "t");
         Hosts(d, 2, 2, "i");
         s->Tensor("gate", {2 * mi, h}).Tensor("up", {2 * mi, h});
         d->Tensor("gate", {2 * mi, h}).Tensor("up", {2 * mi, h});
         for (int64_t r = 0; r < 2; ++r) {
           s->View(r, "gate", {r * mi, 0}, {mi, h}, "gate_up", 0);
           s->View(r, "up", {r * mi, 0}, {mi, h}, "gate_up", mi * h * 4);
           d->View(r, "gate", {r * mi, 0}, {mi, h}, "gate_up", 0, {2 * h, 1});
           d->View(r, "up", {r * mi, 0}, {mi, h}, "gate_up", h * 4, {2 * h, 1});
         }
       }},
      {"column_major_destination",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         Hosts(s, 2, 2, "t");
         Hosts(d, 2, 1, "i");
         s->Tensor("w", {10, 6}).Chunked("w", 0, Ranks(2));
         d->Tensor("w", {10, 6});
         d->View(0, "w", {0, 0}, {10, 3}, "cm", 0, {1, 10});
         d->View(1, "w", {0, 3}, {10, 3}, "cm", 0, {1, 10});
       }},
      {"colocated_data_parallel",
       [](LayoutBuilder* s, LayoutBuilder* d) {
         // Trainer DP replicas share nodes with inference TP ranks.
         for (int64_t r = 0; r < 8; ++r) {
           s->Rank(r, "node" + std::to_string(r / 4), r % 4);
           d->Rank(r, "node" + std::to_string(r / 4), (r + 1) % 4);
         }
         s->Tensor("w", {32, 16}).Chunked("w", 0, {0, 1, 2, 3}).Chunked("w", 0, {4, 5, 6, 7});
         d->Tensor("w", {32, 16}).Chunked("w", 1, {0, 1, 2, 3}).Chunked("w", 1, {4, 5, 6, 7});
       }},
  };
}

}  // namespace refit::testing
