// How rank 0 of a tensor split reaches the ranks that run elsewhere (one
// process per GPU): every message rank 0 sends (rank_messages.h) reaches
// every other rank, in the order sent. Over NCCL between processes
// (backend/cuda/multi_gpu/nccl_rank_channel.h); over memory between threads of one
// process (local_rank_channels), which is how one GPU tests the protocol.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace nt {

class RankChannel {
 public:
  virtual ~RankChannel() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // Rank 0 only.
  virtual void send(std::span<const uint8_t> message) = 0;
  // Every other rank: the next message, waiting for it.
  virtual std::vector<uint8_t> receive() = 0;
  // A check that a waiting receive() runs now and then (whether rank 0 still
  // lives); what it throws ends the wait. Channels between threads need none.
  virtual void watch_sender(std::function<void()> check) { (void)check; }
  // Every rank calls it at the same point with whether it failed (loading
  // its shard); each gets how many ranks did.
  virtual int count_failed(bool failed) = 0;
};

// Channels between `ranks` threads of this process, one per rank (index = rank).
std::vector<std::unique_ptr<RankChannel>> local_rank_channels(int ranks);

}  // namespace nt
