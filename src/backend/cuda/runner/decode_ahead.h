// Decoding a few steps ahead of the host: each step (a captured graph) picks
// its token on the GPU, feeds it to the next step and lands it in a pinned
// ring that the host reads once the step's event has fired, so that the host
// only queues steps and reads picks. Owns the ring, its events and the
// pinned parameters of the sampling chain run on the GPU (sample_top.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/sample_top.h"

namespace nt {

class DecodeAhead {
 public:
  static constexpr int64_t kAhead = 3;  // steps queued beyond the one the host waits for
  static constexpr int kRing = kSampleUniforms;

  DecodeAhead();
  ~DecodeAhead();
  DecodeAhead(const DecodeAhead&) = delete;
  DecodeAhead& operator=(const DecodeAhead&) = delete;

  // Where a step's graph leaves its pick: the step at position p in picks[p % kRing].
  StepAdvance advance(int32_t* token, int32_t* pos) const { return {token, pos, picks_.as<int32_t>(), kRing}; }
  SampleChain& chain() const { return *chain_.as<SampleChain>(); }

  // Queues steps 0, 1, ... (queue(step) launches the step at pos + step) up
  // to kAhead ahead of the pick handed to on_token, until on_token returns
  // false or max_steps picks are handed; returns how many were, with
  // `stream` drained. A step that leaves a negative pick (a poisoned row)
  // drains the stream and calls on_poisoned, which throws.
  int64_t run(cudaStream_t stream, int64_t pos, int64_t max_steps, const std::function<void(int64_t)>& queue,
              const std::function<bool(int32_t)>& on_token, const std::function<void()>& on_poisoned);

 private:
  PinnedBuffer picks_;
  PinnedBuffer chain_;
  std::vector<cudaEvent_t> step_done_;  // step i's in step_done_[i % kRing]
};

}  // namespace nt
