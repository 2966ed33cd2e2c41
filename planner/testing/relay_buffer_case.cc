#include "planner/testing/relay_buffer_case.h"

namespace refit::testing {

RelayBufferCase MakeRelayBufferCase() {
  RelayBufferCase c;
  // "far" (ranks 0-3) holds w, [1024, 1024] F32 = 4 MiB, cut in four along dim 0 (so its
  // four NICs together send it as fast as the near domain's five receive it); "near"
  // (ranks 4-7) hold v.
  c.sources.Tensor("w", {1024, 1024}).Tensor("v", {8, 8});
  for (int64_t r = 0; r < 8; ++r) {
    c.sources.Rank(r, r < 4 ? "far" : "near", static_cast<int32_t>(r % 4));
  }
  c.sources.Chunked("w", 0, {0, 1, 2, 3}).Replicated("v", {4, 5, 6, 7});
  c.destinations.Tensor("w", {1024, 1024}).Tensor("v", {8, 8});
  c.destinations.Rank(0, "inference", 0).Replicated("w", {0}).Replicated("v", {0});
  c.topology.set_name("relay-buffer-case");
  // Latency next to nothing, so that the plan is chosen by bandwidth with a few MiB.
  c.topology.set_message_latency_us(0.001);
  c.topology.set_batch_latency_us(0.001);
  for (const char* host : {"near", "inference"}) {
    v1::HostPlacement* placement = c.topology.add_hosts();
    placement->set_host(host);
    placement->set_nvlink_domain("nvl-a");
  }
  return c;
}

}  // namespace refit::testing
