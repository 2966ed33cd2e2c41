#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/gpu/nccl_communicator.h"

namespace refit::transport::gpu {
namespace {

absl::Status NcclStatus(ncclResult_t result, const char* call) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", ncclGetErrorString(result)));
}

absl::Status CudaStatus(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(status)));
}

// Polls a non-blocking communicator until its last call finished, failed, or the deadline.
absl::Status AwaitComm(ncclComm_t comm, absl::Time deadline, const char* what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
    if (asked != ncclSuccess) return NcclStatus(asked, "ncclCommGetAsyncError");
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclStatus(state, what);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " did not finish by the deadline"));
    }
    absl::SleepFor(absl::Microseconds(50));
  }
}

}  // namespace

struct NcclCommunicator::Handles {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  absl::Status status = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (!status.ok()) return status;
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Handles> handles, int size, int rank, int device)
    : handles_(std::move(handles)), size_(size), rank_(rank), device_(device) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Join(
    const std::string& unique_id, int size, int rank, int device, absl::Time deadline) {
  if (unique_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL unique id has ", sizeof(ncclUniqueId),
                                                   " bytes, not ", unique_id.size()));
  }
  if (size <= 0 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " of ", size));
  }
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));
  auto handles = std::make_unique<Handles>();
  absl::Status status = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (status.ok()) {
    status = CudaStatus(cudaStreamCreateWithFlags(&handles->stream, cudaStreamNonBlocking),
                        "cudaStreamCreateWithFlags");
  }
  if (!status.ok()) return status;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that joining can be abandoned at the deadline
  status = NcclStatus(ncclCommInitRankConfig(&handles->comm, size, id, rank, &config),
                      "ncclCommInitRankConfig");
  if (status.ok()) status = AwaitComm(handles->comm, deadline, "joining the NCCL communicator");
  if (!status.ok()) {
    if (handles->comm != nullptr) ncclCommAbort(handles->comm);
    cudaStreamDestroy(handles->stream);
    return absl::Status(status.code(), absl::StrCat("NCCL rank ", rank, " of ", size, " on device ",
                                                    device, ": ", status.message()));
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(handles), size, rank, device));
}

NcclCommunicator::~NcclCommunicator() {
  if (handles_ == nullptr) return;
  cudaSetDevice(device_);
  if (!aborted_ && handles_->comm != nullptr) ncclCommDestroy(handles_->comm);
  if (handles_->stream != nullptr) cudaStreamDestroy(handles_->stream);
}

void NcclCommunicator::Abort() {
  if (aborted_) return;
  aborted_ = true;
  ncclCommAbort(handles_->comm);
}

absl::Status NcclCommunicator::RunGroup(const std::vector<Message>& messages,
                                        absl::Time deadline) {
  if (aborted_) return absl::FailedPreconditionError("the NCCL communicator was aborted");
  if (messages.empty()) return absl::OkStatus();
  absl::Status status = CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
  if (!status.ok()) return status;
  status = NcclStatus(ncclGroupStart(), "ncclGroupStart");
  for (const Message& m : messages) {
    if (!status.ok()) break;
    if (m.peer < 0 || m.peer >= size_) {
      status = absl::InvalidArgumentError(absl::StrCat("NCCL peer ", m.peer, " of ", size_));
      break;
    }
    status = m.send ? NcclStatus(ncclSend(m.device_buffer, m.bytes, ncclUint8, m.peer,
                                          handles_->comm, handles_->stream),
                                 "ncclSend")
                    : NcclStatus(ncclRecv(m.device_buffer, m.bytes, ncclUint8, m.peer,
                                          handles_->comm, handles_->stream),
                                 "ncclRecv");
  }
  const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  if (status.ok()) status = ended;
  if (status.ok()) status = AwaitComm(handles_->comm, deadline, "issuing the NCCL group");
  // The group is on the stream: wait for it, watching for NCCL errors and the deadline.
  while (status.ok()) {
    const cudaError_t done = cudaStreamQuery(handles_->stream);
    if (done == cudaSuccess) break;
    if (done != cudaErrorNotReady) {
      status = CudaStatus(done, "cudaStreamQuery");
      break;
    }
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(handles_->comm, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      status = NcclStatus(state, "NCCL send/receive");
    } else if (absl::Now() > deadline) {
      status = absl::DeadlineExceededError(absl::StrCat(
          "NCCL rank ", rank_, ": ", messages.size(), " sends and receives unfinished at the deadline"));
    } else {
      absl::SleepFor(absl::Microseconds(20));
    }
  }
  if (!status.ok()) Abort();
  return status;
}

}  // namespace refit::transport::gpu
