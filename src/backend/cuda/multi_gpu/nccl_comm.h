// One rank of an NCCL communicator: one process (or thread) per GPU, joined
// through NCCL's unique-id bootstrap, so that the same code serves one host
// and several. The tensor split's partial sums are added with all_reduce_sum.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/multi_gpu/nccl_library.h"

namespace nt {

// A fresh bootstrap id (rank 0 makes it; every rank must join with it).
nccl::UniqueId new_unique_id(const NcclLibrary& nccl);

// Rank 0 makes an id and publishes it at `path`; the other ranks wait up to
// timeout_s for it there (runtime/unique_id_exchange.h).
nccl::UniqueId exchange_unique_id(const NcclLibrary& nccl, int rank, const std::string& path, double timeout_s);

class NcclComm {
 public:
  // Joins as `rank` of n_ranks on CUDA device `gpu`; blocks until every rank
  // has joined. Throws nt::Error naming the rank and GPU.
  NcclComm(const NcclLibrary& nccl, const nccl::UniqueId& id, int n_ranks, int rank, int gpu);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // recv[i] = the sum over ranks of their send[i], for `count` floats, ordered
  // on `stream` of this rank's GPU (in place when send == recv).
  void all_reduce_sum(const float* send, float* recv, size_t count, cudaStream_t stream) const;
  // Rank 0's `bytes` bytes at `buffer` (device memory) land in every rank's
  // `buffer`, ordered on `stream`.
  void broadcast_from_first(void* buffer, size_t bytes, cudaStream_t stream) const;
  // Waits for the work queued on `stream` while watching the communicator's
  // asynchronous error: a failed peer or link ends the wait with nt::Error
  // naming `what` (the communicator is aborted then) where NCCL reports it.
  // `check`, when given, runs every 100 ms of waiting; what it throws ends
  // the wait (the communicator is aborted then too).
  void wait(cudaStream_t stream, const std::string& what, const std::function<void()>& check = {});

  // The single-process form: one communicator over this process's `gpus`,
  // rank i on gpus[i], joined inside one NCCL group (joining one by one would
  // block on the first). Collectives over several of these from one thread
  // must be issued between nccl.group_start() and nccl.group_end() too.
  static std::vector<std::unique_ptr<NcclComm>> join_local_gpus(const NcclLibrary& nccl, const std::vector<int>& gpus);

  int rank() const { return rank_; }
  int n_ranks() const { return n_ranks_; }
  int gpu() const { return gpu_; }

 private:
  const NcclLibrary& nccl_;
  nccl::Comm comm_ = nullptr;
  int n_ranks_ = 0, rank_ = 0, gpu_ = 0;
};

}  // namespace nt
