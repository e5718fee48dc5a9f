// RankChannel (runtime/rank_channel.h) between processes, over the tensor
// split's NCCL communicator: a message is two broadcasts from rank 0 on a
// stream of the channel's own, its length and then its bytes, through a
// device buffer as long as the longest message so far. The channel's waits
// watch NCCL's asynchronous error (NcclComm::wait).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/multi_gpu/nccl_comm.h"
#include "runtime/rank_channel.h"

namespace nt {

class NcclRankChannel final : public RankChannel {
 public:
  explicit NcclRankChannel(NcclComm& comm);
  ~NcclRankChannel() override;
  NcclRankChannel(const NcclRankChannel&) = delete;
  NcclRankChannel& operator=(const NcclRankChannel&) = delete;

  int rank() const override { return comm_.rank(); }
  int ranks() const override { return comm_.n_ranks(); }
  void send(std::span<const uint8_t> message) override;
  std::vector<uint8_t> receive() override;
  void watch_sender(std::function<void()> check) override { watch_sender_ = std::move(check); }
  int count_failed(bool failed) override;

 private:
  // Broadcasts `bytes` bytes of `host` from rank 0 (every rank's `host` gets rank 0's).
  void broadcast(void* host, size_t bytes, const char* what);

  NcclComm& comm_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer buffer_;
  std::function<void()> watch_sender_;  // run while a follower waits
};

}  // namespace nt
