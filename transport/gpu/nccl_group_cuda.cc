#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/gpu/cuda_checks.h"
#include "transport/gpu/nccl_group.h"

namespace refit::transport::gpu {
namespace {

absl::Status NcclStatus(ncclResult_t result, const char* call) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", ncclGetErrorString(result)));
}

}  // namespace

struct NcclGroup::Handles {
  struct Gpu {
    NcclGroup::Member member;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  std::vector<Gpu> gpus;

  // Polls the (non-blocking) communicators until their last calls finished, one failed,
  // or the deadline passed.
  absl::Status AwaitComms(absl::Time deadline, const Interrupt* interrupt, const char* what) const {
    for (const Gpu& gpu : gpus) {
      while (true) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t asked = ncclCommGetAsyncError(gpu.comm, &state);
        if (asked != ncclSuccess) return NcclStatus(asked, "ncclCommGetAsyncError");
        if (state == ncclSuccess) break;
        if (state != ncclInProgress) {
          return absl::Status(
              NcclStatus(state, what).code(),
              absl::StrCat("NCCL rank ", gpu.member.rank, ": ", NcclStatus(state, what).message()));
        }
        if (interrupt != nullptr && interrupt->raised()) {
          return absl::CancelledError(absl::StrCat("NCCL rank ", gpu.member.rank, ": ", what,
                                                   " was interrupted (", interrupt->reason(), ")"));
        }
        if (absl::Now() > deadline) {
          return absl::DeadlineExceededError(absl::StrCat("NCCL rank ", gpu.member.rank, ": ", what,
                                                          " did not finish by the deadline"));
        }
        absl::SleepFor(absl::Microseconds(50));
      }
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::string> NcclGroup::NewUniqueId() {
  ncclUniqueId id;
  absl::Status status = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (!status.ok()) return status;
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

NcclGroup::NcclGroup(std::unique_ptr<Handles> handles, int size)
    : handles_(std::move(handles)), size_(size) {}

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Join(const std::string& unique_id, int size,
                                                           const std::vector<Member>& members,
                                                           absl::Time deadline,
                                                           const Interrupt* interrupt) {
  if (unique_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL unique id has ", sizeof(ncclUniqueId),
                                                   " bytes, not ", unique_id.size()));
  }
  if (members.empty()) return absl::InvalidArgumentError("no GPUs to join the NCCL group with");
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));
  auto handles = std::make_unique<Handles>();
  auto fail = [&](const absl::Status& status) {
    for (Handles::Gpu& gpu : handles->gpus) {
      cudaSetDevice(gpu.member.device);
      if (gpu.comm != nullptr) ncclCommAbort(gpu.comm);
      if (gpu.stream != nullptr) cudaStreamDestroy(gpu.stream);
    }
    return status;
  };
  for (const Member& member : members) {
    if (member.rank < 0 || member.rank >= size) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("NCCL rank ", member.rank, " of ", size)));
    }
    Handles::Gpu& gpu = handles->gpus.emplace_back();
    gpu.member = member;
    absl::Status status = CudaStatus(cudaSetDevice(member.device), "cudaSetDevice");
    if (status.ok()) {
      status = CudaStatus(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking),
                          "cudaStreamCreateWithFlags");
    }
    if (!status.ok()) return fail(status);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that joining can be abandoned at the deadline
  absl::Status status = NcclStatus(ncclGroupStart(), "ncclGroupStart");
  for (Handles::Gpu& gpu : handles->gpus) {
    if (!status.ok()) break;
    status = CudaStatus(cudaSetDevice(gpu.member.device), "cudaSetDevice");
    if (!status.ok()) break;
    status = NcclStatus(ncclCommInitRankConfig(&gpu.comm, size, id, gpu.member.rank, &config),
                        "ncclCommInitRankConfig");
  }
  const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  if (status.ok()) status = ended;
  if (status.ok())
    status = handles->AwaitComms(deadline, interrupt, "joining the NCCL communicator");
  if (!status.ok()) return fail(status);
  return std::unique_ptr<NcclGroup>(new NcclGroup(std::move(handles), size));
}

NcclGroup::~NcclGroup() {
  if (handles_ == nullptr) return;
  for (Handles::Gpu& gpu : handles_->gpus) {
    cudaSetDevice(gpu.member.device);
    if (!aborted_ && gpu.comm != nullptr) ncclCommDestroy(gpu.comm);
    if (gpu.stream != nullptr) cudaStreamDestroy(gpu.stream);
  }
}

void NcclGroup::Abort() {
  if (aborted_) return;
  aborted_ = true;
  for (Handles::Gpu& gpu : handles_->gpus) ncclCommAbort(gpu.comm);
}

absl::Status NcclGroup::RunStep(const std::vector<Message>& messages, absl::Time deadline) {
  if (aborted_) return absl::FailedPreconditionError("the NCCL group was aborted");
  if (messages.empty()) return absl::OkStatus();
  absl::Status status = NcclStatus(ncclGroupStart(), "ncclGroupStart");
  for (const Message& m : messages) {
    if (!status.ok()) break;
    if (m.member < 0 || m.member >= static_cast<int>(handles_->gpus.size()) || m.peer < 0 ||
        m.peer >= size_) {
      status = absl::InvalidArgumentError(
          absl::StrCat("NCCL message of member ", m.member, " to or from rank ", m.peer));
      break;
    }
    const Handles::Gpu& gpu = handles_->gpus[m.member];
    status = CudaStatus(cudaSetDevice(gpu.member.device), "cudaSetDevice");
    if (!status.ok()) break;
    status = m.send
                 ? NcclStatus(
                       ncclSend(m.device_buffer, m.bytes, ncclUint8, m.peer, gpu.comm, gpu.stream),
                       "ncclSend")
                 : NcclStatus(
                       ncclRecv(m.device_buffer, m.bytes, ncclUint8, m.peer, gpu.comm, gpu.stream),
                       "ncclRecv");
  }
  const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  if (status.ok()) status = ended;
  if (status.ok()) status = handles_->AwaitComms(deadline, interrupt_, "issuing the NCCL step");
  // The step is on the members' streams: wait for them, watching for NCCL errors and the
  // deadline.
  for (const Handles::Gpu& gpu : handles_->gpus) {
    while (status.ok()) {
      status = CudaStatus(cudaSetDevice(gpu.member.device), "cudaSetDevice");
      if (!status.ok()) break;
      const cudaError_t done = cudaStreamQuery(gpu.stream);
      if (done == cudaSuccess) break;
      if (done != cudaErrorNotReady) {
        status = CudaStatus(done, "cudaStreamQuery");
        break;
      }
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(gpu.comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        status = NcclStatus(state, "NCCL send/receive");
      } else if (interrupt_ != nullptr && interrupt_->raised()) {
        status = absl::CancelledError(absl::StrCat("NCCL rank ", gpu.member.rank, ": interrupted (",
                                                   interrupt_->reason(),
                                                   ") with sends and receives unfinished"));
      } else if (absl::Now() > deadline) {
        status = absl::DeadlineExceededError(absl::StrCat(
            "NCCL rank ", gpu.member.rank, ": sends and receives unfinished at the deadline"));
      } else {
        absl::SleepFor(absl::Microseconds(20));
      }
    }
  }
  if (!status.ok()) Abort();
  return status;
}

}  // namespace refit::transport::gpu
