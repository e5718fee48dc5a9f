#include "backend/cuda/multi_gpu/residual_reducer.h"

#include <condition_variable>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "core/error.h"

namespace nt {
namespace {

class NcclReducer final : public ResidualReducer {
 public:
  explicit NcclReducer(NcclComm& comm) : comm_(comm) {}
  void sum(float* x, int64_t count, cudaStream_t stream) override { comm_.all_reduce_sum(x, x, size_t(count), stream); }
  bool queues_only() const override { return true; }
  void wait(cudaStream_t stream) override { comm_.wait(stream, "a tensor-split pass"); }

 private:
  NcclComm& comm_;
};

// The ranks' meeting place: a barrier that counts generations, so that a
// rank arriving for the next sum cannot pass one still being left.
class SharedGpuSum {
 public:
  explicit SharedGpuSum(int ranks) : ranks_(ranks), rows_(size_t(ranks)) {}

  void sum(int rank, float* x, int64_t count, cudaStream_t stream) {
    NT_CUDA_CHECK(cudaStreamSynchronize(stream));  // this rank's partial sum is written
    rows_[size_t(rank)] = x;
    meet();
    if (rank == 0) {
      for (int r = 1; r < ranks_; ++r) add_floats(rows_[size_t(r)], x, count, stream);
      for (int r = 1; r < ranks_; ++r) copy_floats(x, rows_[size_t(r)], count, stream);
      NT_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    meet();  // the sum is in every rank's rows
  }

  void abort() {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    wake_.notify_all();
  }

  void rearm() {
    std::lock_guard lock(mutex_);
    aborted_ = false;
    arrived_ = 0;
  }

 private:
  void meet() {
    std::unique_lock lock(mutex_);
    if (aborted_) throw ReductionAborted();
    const uint64_t generation = generation_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return;
    }
    wake_.wait(lock, [&] { return generation_ != generation || aborted_; });
    if (generation_ == generation) throw ReductionAborted();
  }

  const int ranks_;
  std::vector<float*> rows_;
  std::mutex mutex_;
  std::condition_variable wake_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

class SharedGpuReducer final : public ResidualReducer {
 public:
  SharedGpuReducer(std::shared_ptr<SharedGpuSum> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  void sum(float* x, int64_t count, cudaStream_t stream) override { shared_->sum(rank_, x, count, stream); }
  void abort() override { shared_->abort(); }
  void rearm() override { shared_->rearm(); }

 private:
  std::shared_ptr<SharedGpuSum> shared_;
  int rank_;
};

}  // namespace

void ResidualReducer::wait(cudaStream_t stream) { NT_CUDA_CHECK(cudaStreamSynchronize(stream)); }

std::unique_ptr<ResidualReducer> nccl_reducer(NcclComm& comm) { return std::make_unique<NcclReducer>(comm); }

std::vector<std::unique_ptr<ResidualReducer>> shared_gpu_reducers(int ranks) {
  if (ranks < 1) fail("a tensor split needs at least one rank, got {}", ranks);
  const auto shared = std::make_shared<SharedGpuSum>(ranks);
  std::vector<std::unique_ptr<ResidualReducer>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<SharedGpuReducer>(shared, r));
  return out;
}

}  // namespace nt
