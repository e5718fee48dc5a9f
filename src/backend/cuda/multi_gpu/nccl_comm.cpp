#include "backend/cuda/multi_gpu/nccl_comm.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "runtime/unique_id_exchange.h"

namespace nt {

nccl::UniqueId new_unique_id(const NcclLibrary& nccl) {
  nccl::UniqueId id{};
  nccl.check(nccl.get_unique_id(&id), "ncclGetUniqueId");
  return id;
}

nccl::UniqueId exchange_unique_id(const NcclLibrary& nccl, int rank, const std::string& path, double timeout_s) {
  nccl::UniqueId id{};
  std::vector<uint8_t> bytes(sizeof id.internal);
  if (rank == 0) {
    id = new_unique_id(nccl);
    std::memcpy(bytes.data(), id.internal, bytes.size());
    publish_unique_id(path, bytes);
  } else {
    bytes = wait_for_unique_id(path, bytes.size(), timeout_s);
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  return id;
}

NcclComm::NcclComm(const NcclLibrary& nccl, const nccl::UniqueId& id, int n_ranks, int rank, int gpu)
    : nccl_(nccl), n_ranks_(n_ranks), rank_(rank), gpu_(gpu) {
  if (n_ranks < 1 || rank < 0 || rank >= n_ranks) fail("NCCL rank {} of {} is out of range", rank, n_ranks);
  NT_CUDA_CHECK(cudaSetDevice(gpu));
  nccl.check(nccl.comm_init_rank(&comm_, n_ranks, id, rank),
             fmt::format("ncclCommInitRank (rank {} of {} on GPU {})", rank, n_ranks, gpu));
}

NcclComm::~NcclComm() {
  if (comm_) nccl_.comm_destroy(comm_);
}

std::vector<std::unique_ptr<NcclComm>> NcclComm::join_local_gpus(const NcclLibrary& nccl, const std::vector<int>& gpus) {
  const nccl::UniqueId id = new_unique_id(nccl);
  std::vector<std::unique_ptr<NcclComm>> comms;
  nccl.check(nccl.group_start(), "ncclGroupStart");
  try {
    for (size_t i = 0; i < gpus.size(); ++i) comms.push_back(std::make_unique<NcclComm>(nccl, id, int(gpus.size()), int(i), gpus[i]));
  } catch (...) {
    nccl.group_end();  // close the group before the error leaves
    throw;
  }
  nccl.check(nccl.group_end(), fmt::format("joining GPUs {} in one communicator", fmt::join(gpus, ",")));
  return comms;
}

void NcclComm::all_reduce_sum(const float* send, float* recv, size_t count, cudaStream_t stream) const {
  nccl_.check(nccl_.all_reduce(send, recv, count, nccl::kFloat32, nccl::kSum, comm_, stream),
              fmt::format("ncclAllReduce of {} floats (rank {} on GPU {})", count, rank_, gpu_));
}

void NcclComm::broadcast_from_first(void* buffer, size_t bytes, cudaStream_t stream) const {
  nccl_.check(nccl_.broadcast(buffer, buffer, bytes, nccl::kUint8, 0, comm_, stream),
              fmt::format("ncclBroadcast of {} bytes (rank {} on GPU {})", bytes, rank_, gpu_));
}

void NcclComm::wait(cudaStream_t stream, const std::string& what, const std::function<void()>& check) {
  const auto abort = [&] {
    nccl_.comm_abort(comm_);
    comm_ = nullptr;
  };
  const auto start = std::chrono::steady_clock::now();
  auto next_check = start;
  for (;;) {
    const cudaError_t done = cudaStreamQuery(stream);
    if (done == cudaSuccess) return;
    if (done != cudaErrorNotReady) NT_CUDA_CHECK(done);
    nccl::Result async = nccl::kSuccess;
    nccl_.check(nccl_.comm_get_async_error(comm_, &async), "ncclCommGetAsyncError");
    if (async != nccl::kSuccess && async != nccl::kInProgress) {
      const std::string error = nccl_.get_error_string(async);
      abort();
      fail("{} (rank {} of {} on GPU {}): NCCL reports {}; the communicator is aborted", what, rank_, n_ranks_, gpu_, error);
    }
    if (check && std::chrono::steady_clock::now() >= next_check) {
      next_check += std::chrono::milliseconds(100);
      try {
        check();
      } catch (...) {
        abort();
        throw;
      }
    }
    // Yielding polls while a pass or a message may end any moment; a long
    // wait (a follower idle between requests) sleeps between them.
    if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(50)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

}  // namespace nt
