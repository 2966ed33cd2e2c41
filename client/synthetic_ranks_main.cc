// refit-synthetic-ranks: stands in for the trainer or inference processes of one node in
// demos and end-to-end tests. It holds the node's ranks of a reference refit in real
// shared memory and registers them with the node's refitd. As sources, for each version it
// writes that version's weights, publishes, and asks the coordinator to refit; as
// destinations, it waits for each version and checks every byte it received.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/daemon_clients.h"
#include "client/gpu_buffers.h"
#include "client/quantized_check.h"
#include "config/model_files.h"
#include "planner/dtype.h"
#include "planner/quantization.h"
#include "planner/reference_refits.h"
#include "transport/shared_memory.h"
#include "transport/synthetic_weights.h"

ABSL_FLAG(std::string, socket, "/run/refit/refitd.sock", "the node's refitd socket");
ABSL_FLAG(std::string, coordinator, "", "coordinator address (sources: trigger refits)");
ABSL_FLAG(std::string, side, "source", "source (trainer) or destination (inference)");
ABSL_FLAG(std::string, refit, "mini", "reference refit whose layouts to hold");
ABSL_FLAG(std::string, model, "",
          "instead of --refit: a builtin model or a model config JSON, with the parallel "
          "settings below");
ABSL_FLAG(std::string, source_parallel, "pp=2,ep=2", "with --model: the trainers' setting");
ABSL_FLAG(std::string, destination_parallel, "tp=2,dp=2", "with --model: the inference setting");
ABSL_FLAG(std::string, host, "", "hold the ranks whose host is this (default: all)");
ABSL_FLAG(int64_t, versions, 3, "number of versions (epochs) to run");
ABSL_FLAG(int64_t, first_version, 1, "the first version to publish or wait for");
ABSL_FLAG(int64_t, timeout_ms, 60000, "deadline of each wait");
ABSL_FLAG(std::string, ack_dir, "",
          "hand-off folder standing in for the orchestrator: destinations write "
          "verified-N-HOST there once version N is checked; sources wait for --ack_from of "
          "them before refitting N+1, and for the last version's before leaving");
ABSL_FLAG(int32_t, ack_from, 1, "how many destination processes acknowledge each version");
ABSL_FLAG(int32_t, gpus_per_node, 8, "with --model: GPUs per node (hosts of the ranks)");
ABSL_FLAG(int32_t, gpu, -1,
          "hold the weights in GPU memory on this CUDA device (registered by CUDA IPC handle; "
          "host memory stages the fill and the check); -1: shared memory");
ABSL_FLAG(std::string, destination_quantization, "",
          "block_fp8: the inference ranks hold the layers' linear weights in FP8 with 128 x 128 "
          "block scales (planner::QuantizeLinearWeights) and check every code and scale");
ABSL_FLAG(bool, staged, false,
          "destination ranks: register staged (refitd writes a shadow and copies it into the "
          "buffers at commit, so a failed epoch leaves them as they were)");

namespace refit::client {
namespace {

struct HeldView {
  int64_t rank;
  std::string tensor;
  transport::Dims shape, offset, extent;
  int element_bytes;
  std::unique_ptr<transport::SharedMemorySegment> segment;
  std::unique_ptr<GpuBuffer> gpu;  // with --gpu: the registered copy
};

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "refit-synthetic-ranks: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

int Run() {
  const bool source = absl::GetFlag(FLAGS_side) == "source";
  const v1::Role role = source ? v1::ROLE_SOURCE : v1::ROLE_DESTINATION;
  const absl::Duration timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  absl::StatusOr<planner::RefitScenario> scenario =
      absl::GetFlag(FLAGS_model).empty()
          ? planner::ReferenceRefit(absl::GetFlag(FLAGS_refit))
          : config::LoadModelRefit(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_source_parallel),
                                   absl::GetFlag(FLAGS_destination_parallel),
                                   absl::GetFlag(FLAGS_gpus_per_node));
  if (!scenario.ok()) return Fail("refit", scenario.status());
  const std::string quantization = absl::GetFlag(FLAGS_destination_quantization);
  if (!quantization.empty()) {
    if (quantization != planner::kBlockFp8) {
      return Fail("--destination_quantization", absl::InvalidArgumentError(absl::StrCat(
                                                    "\"", quantization, "\" is not block_fp8")));
    }
    planner::QuantizeLinearWeights(&scenario->destinations);
  }
  const QuantizedCheck quantized(scenario->sources, scenario->destinations);
  const v1::LayoutSpec& spec = source ? scenario->sources : scenario->destinations;
  std::map<std::string, const v1::TensorSpec*> tensors;
  for (const v1::TensorSpec& t : spec.tensors()) tensors[t.name()] = &t;

  LocalDaemonClient daemon(absl::GetFlag(FLAGS_socket));
  const int32_t gpu_device = absl::GetFlag(FLAGS_gpu);
  std::vector<HeldView> views;
  std::vector<int64_t> ranks;
  std::vector<std::unique_ptr<RegistrationHold>> holds;
  int64_t held_bytes = 0;
  for (const v1::RankLayout& layout : spec.ranks()) {
    if (!absl::GetFlag(FLAGS_host).empty() && layout.host() != absl::GetFlag(FLAGS_host)) continue;
    v1::RankLayout registered = layout;
    registered.set_staged(!source && absl::GetFlag(FLAGS_staged));
    for (int i = 0; i < registered.views_size(); ++i) {
      v1::ShardView* view = registered.mutable_views(i);
      const v1::TensorSpec& tensor = *tensors.at(view->tensor());
      HeldView held{layout.rank(),
                    view->tensor(),
                    transport::Dims(tensor.shape().begin(), tensor.shape().end()),
                    transport::Dims(view->offset().begin(), view->offset().end()),
                    transport::Dims(view->extent().begin(), view->extent().end()),
                    *planner::DtypeBytes(tensor.dtype()),
                    nullptr};
      int64_t bytes = held.element_bytes;
      for (int64_t e : held.extent) bytes *= e;
      // The pid alone repeats across pid namespaces (containers, sandboxes).
      static const uint32_t token = std::random_device()();
      const std::string name =
          absl::StrCat("/refit-", getpid(), "-", absl::Hex(token), "-", layout.rank(), "-", i);
      auto segment = transport::SharedMemorySegment::Create(name, bytes);
      if (!segment.ok()) return Fail("shared memory", segment.status());
      held.segment = std::move(*segment);
      held_bytes += bytes;
      view->set_buffer(absl::StrCat("view-", i));
      v1::BufferSpec* buffer = registered.add_buffers();
      if (gpu_device >= 0) {
        absl::StatusOr<std::unique_ptr<GpuBuffer>> memory = GpuBuffer::Allocate(bytes, gpu_device);
        if (!memory.ok()) return Fail("GPU memory", memory.status());
        absl::StatusOr<v1::BufferSpec> spec = (*memory)->Registration(view->buffer());
        if (!spec.ok()) return Fail("GPU registration", spec.status());
        *buffer = *spec;
        held.gpu = std::move(*memory);
        registered.set_device(gpu_device);
      } else {
        buffer->set_name(view->buffer());
        buffer->set_bytes(bytes);
        buffer->set_shm_name(name);
      }
      views.push_back(std::move(held));
    }
    absl::StatusOr<std::string> session = daemon.Register(role, registered, spec.tensors());
    if (!session.ok()) return Fail(absl::StrCat("register rank ", layout.rank()), session.status());
    // If this process dies, refitd deregisters the rank when the hold's connection closes.
    absl::StatusOr<std::unique_ptr<RegistrationHold>> hold = daemon.Hold(*session);
    if (!hold.ok()) return Fail(absl::StrCat("hold rank ", layout.rank()), hold.status());
    holds.push_back(std::move(*hold));
    ranks.push_back(layout.rank());
  }
  std::printf("%s ranks registered: %zu ranks, %zu views, %.1f MB\n",
              source ? "source" : "destination", ranks.size(), views.size(), held_bytes / 1e6);
  std::fflush(stdout);

  std::unique_ptr<CoordinatorClient> coordinator;
  if (!absl::GetFlag(FLAGS_coordinator).empty()) {
    coordinator = std::make_unique<CoordinatorClient>(absl::GetFlag(FLAGS_coordinator));
  }
  const std::string ack_dir = absl::GetFlag(FLAGS_ack_dir);
  const std::string host = absl::GetFlag(FLAGS_host).empty() ? "all" : absl::GetFlag(FLAGS_host);
  auto ack_path = [&](int64_t version) {
    return absl::StrCat(ack_dir, "/verified-", version, "-", host);
  };
  // How many destination processes have acknowledged `version`.
  auto acks = [&](int64_t version) {
    const std::string prefix = absl::StrCat("verified-", version, "-");
    int count = 0;
    if (DIR* dir = opendir(ack_dir.c_str())) {
      while (const dirent* entry = readdir(dir)) count += absl::StartsWith(entry->d_name, prefix);
      closedir(dir);
    }
    return count;
  };
  // Waits until --ack_from destination processes have checked `version`.
  auto await_acks = [&](int64_t version) -> absl::Status {
    const absl::Time give_up = absl::Now() + timeout;
    while (acks(version) < absl::GetFlag(FLAGS_ack_from)) {
      if (absl::Now() > give_up) {
        return absl::DeadlineExceededError(
            absl::StrCat("version ", version, " was not acknowledged by ",
                         absl::GetFlag(FLAGS_ack_from), " processes in time"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::OkStatus();
  };
  const int64_t first = absl::GetFlag(FLAGS_first_version);
  const int64_t last = first + absl::GetFlag(FLAGS_versions) - 1;
  for (int64_t version = first; version <= last; ++version) {
    if (source) {
      // The inference side must be done reading the previous version before it is replaced.
      if (!ack_dir.empty() && version > first) {
        absl::Status acked = await_acks(version - 1);
        if (!acked.ok()) return Fail("hand-off", acked);
      }
      for (HeldView& v : views) {
        transport::FillBox(
            v.tensor, v.shape, v.element_bytes, v.offset, v.extent,
            transport::StridedRef{v.segment->data(), transport::RowMajorStrides(v.extent)},
            version);
        if (v.gpu != nullptr) {
          absl::Status copied = v.gpu->CopyFromHost(v.segment->data());
          if (!copied.ok()) return Fail("fill GPU memory", copied);
        }
      }
      for (int64_t rank : ranks) {
        absl::Status published = daemon.Publish(rank, version);
        if (!published.ok()) return Fail("publish", published);
      }
      if (coordinator == nullptr) continue;
      // The inference side may still be registering: retry while the group is incomplete.
      absl::StatusOr<v1::RefitReport> report = coordinator->Refit(version, timeout);
      const absl::Time give_up = absl::Now() + timeout;
      while (!report.ok() && absl::IsFailedPrecondition(report.status()) &&
             absl::StrContains(report.status().message(), "incomplete") && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(100));
        report = coordinator->Refit(version, timeout);
      }
      if (!report.ok()) return Fail(absl::StrCat("refit of version ", version), report.status());
      std::printf(
          "epoch %s: version %lld, %.1f MB in %.3f s (%.2f GB/s); %.3f s after the last "
          "publish\n",
          report->epoch_id().c_str(), static_cast<long long>(version), report->bytes() / 1e6,
          report->seconds(), report->bytes() / std::max(1e-9, report->seconds()) / 1e9,
          report->epoch_seconds());
    } else {
      for (int64_t rank : ranks) {
        absl::StatusOr<int64_t> got = daemon.WaitForVersion(rank, version, timeout);
        if (!got.ok()) return Fail(absl::StrCat("wait for version ", version), got.status());
      }
      int64_t wrong = 0;
      for (HeldView& v : views) {
        if (v.gpu != nullptr) {
          absl::Status copied = v.gpu->CopyToHost(v.segment->data());
          if (!copied.ok()) return Fail("read GPU memory", copied);
        }
        wrong +=
            quantized.Covers(v.tensor)
                ? quantized.WrongBytes(v.tensor, v.offset, v.extent, v.segment->data(), version)
                : transport::WrongBytesInBox(
                      v.tensor, v.shape, v.element_bytes, v.offset, v.extent,
                      transport::StridedRef{v.segment->data(),
                                            transport::RowMajorStrides(v.extent)},
                      version);
      }
      std::printf("version %lld: %lld of %.1f MB wrong\n", static_cast<long long>(version),
                  static_cast<long long>(wrong), held_bytes / 1e6);
      if (wrong != 0) return 1;
      if (!ack_dir.empty()) std::fclose(std::fopen(ack_path(version).c_str(), "w"));
    }
    std::fflush(stdout);
  }
  // Sources stay until the last version is checked: a trainer process that only publishes
  // (another one asks for the refit) must not leave while the epoch still reads it.
  if (source && !ack_dir.empty()) {
    absl::Status acked = await_acks(last);
    if (!acked.ok()) return Fail("hand-off", acked);
  }
  for (int64_t rank : ranks) daemon.Deregister(role, rank).IgnoreError();
  return 0;
}

}  // namespace
}  // namespace refit::client

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return refit::client::Run();
}
