// The tensor split's sum across ranks (GPUs): after attn_output and ffn_down
// every rank holds a partial sum of each hidden row (rank 0's with the
// residual added), and every rank needs the whole before the next norm.
// NCCL's all-reduce does it between GPUs; ranks that share one GPU (the test
// mode, `--gpus 0,0 --split tensor`) add through that GPU's memory instead.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "backend/cuda/multi_gpu/nccl_comm.h"

namespace nt {

// What a rank waiting in sum() throws when another rank failed (abort()).
struct ReductionAborted : std::runtime_error {
  ReductionAborted() : std::runtime_error("a tensor-split rank failed") {}
};

class ResidualReducer {
 public:
  virtual ~ResidualReducer() = default;
  // x (count floats on this rank's GPU) := the sum over ranks of theirs,
  // ordered on this rank's `stream`. Every rank calls it for the same rows
  // in the same order.
  virtual void sum(float* x, int64_t count, cudaStream_t stream) = 0;
  // Wakes every rank waiting in sum() with ReductionAborted (host-side waits
  // only), and every later call until rearm(), which the runner calls
  // before a pass while no rank is inside sum().
  virtual void abort() {}
  virtual void rearm() {}
  // Whether sum() only queues work on the stream, so that a CUDA graph can
  // capture it (NCCL's all-reduce); the shared-GPU sums wait on the host.
  virtual bool queues_only() const { return false; }
  // Waits for the work queued on `stream` (a pass with its sums); NCCL's
  // ends with nt::Error where NCCL reports a failed rank or link.
  virtual void wait(cudaStream_t stream);
};

// One reducer per rank of `comm` (one communicator over the ranks' GPUs).
std::unique_ptr<ResidualReducer> nccl_reducer(NcclComm& comm);

// Reducers for `ranks` ranks on one GPU, one per rank: each rank's call waits
// for its stream and for the others, then rank 0 adds every rank's rows in
// rank order and copies the sum back to each. Host-synchronised: a test mode,
// not a fast path.
std::vector<std::unique_ptr<ResidualReducer>> shared_gpu_reducers(int ranks);

}  // namespace nt
