// The hand-off between two stages of a layer-split pipeline: a chunk's
// hidden state ([rows][dim] floats) from the residual stream of the stage on
// GPU `from` to that of the next stage on GPU `to`. Peer to peer where the
// GPUs reach each other (enable_peer_access), through a pinned host buffer
// otherwise, and a plain device copy when both stages share one GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/device_buffer.h"

namespace nt {

class HiddenStateLink {
 public:
  // Up to max_bytes a hand-off. Throws naming both GPUs when the driver
  // refuses peer access it reports possible.
  HiddenStateLink(int from, int to, uint64_t max_bytes);
  ~HiddenStateLink();
  HiddenStateLink(const HiddenStateLink&) = delete;
  HiddenStateLink& operator=(const HiddenStateLink&) = delete;

  // Queues the copy of `bytes` of `src` (on `from`, once the work queued on
  // src_stream is done) into `dst` (on `to`); the work queued on dst_stream
  // afterwards waits for it. The receiving stage must be done with its
  // previous chunk (the pipeline's hand-off slots see to it), and the
  // source must stay unchanged until the copy has run (work queued later
  // on src_stream).
  void carry(const float* src, cudaStream_t src_stream, float* dst, cudaStream_t dst_stream, uint64_t bytes);

  // "peer to peer", "on one GPU", or why the copies go through host memory; for logs.
  std::string route() const;

 private:
  enum class Route { SameGpu, Peer, Host };
  int from_, to_;
  uint64_t max_bytes_;
  Route route_ = Route::SameGpu;
  std::string no_peer_;  // why the host route, when it is taken
  PinnedBuffer bounce_;  // the host route's staging
  cudaEvent_t sent_ = nullptr;  // on `from`: the copy (or its device-to-host half) is done
};

}  // namespace nt
