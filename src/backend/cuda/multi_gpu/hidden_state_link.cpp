#include "backend/cuda/multi_gpu/hidden_state_link.h"

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/multi_gpu/gpu_set.h"
#include "core/error.h"

namespace nt {

HiddenStateLink::HiddenStateLink(int from, int to, uint64_t max_bytes) : from_(from), to_(to), max_bytes_(max_bytes) {
  if (from != to) route_ = enable_peer_access(from, to, &no_peer_) ? Route::Peer : Route::Host;
  if (route_ == Route::Host) {
    bounce_ = PinnedBuffer(max_bytes, fmt::format("the hidden state from GPU {} to GPU {}", from, to).c_str());
  }
  NT_CUDA_CHECK(cudaSetDevice(from));
  NT_CUDA_CHECK(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming));
}

HiddenStateLink::~HiddenStateLink() {
  if (sent_) cudaEventDestroy(sent_);
}

void HiddenStateLink::carry(const float* src, cudaStream_t src_stream, float* dst, cudaStream_t dst_stream,
                            uint64_t bytes) {
  if (bytes > max_bytes_) {
    fail("the hidden state from GPU {} to GPU {}: {} bytes exceed the link's {}", from_, to_, bytes, max_bytes_);
  }
  // A failure names both GPUs: a peer path that the driver reported but cannot use shows here.
  const auto check = [&](cudaError_t err, const char* step) {
    if (err != cudaSuccess) {
      fail("the hidden state from GPU {} to GPU {} ({}): {} failed: {} ({})", from_, to_, route(), step,
           cudaGetErrorName(err), cudaGetErrorString(err));
    }
  };
  check(cudaSetDevice(from_), "selecting the sending GPU");
  switch (route_) {
    case Route::SameGpu: check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, src_stream), "the copy"); break;
    case Route::Peer: check(cudaMemcpyPeerAsync(dst, to_, src, from_, bytes, src_stream), "the peer copy"); break;
    case Route::Host:
      check(cudaMemcpyAsync(bounce_.as<void>(), src, bytes, cudaMemcpyDeviceToHost, src_stream), "the copy to the host");
      break;
  }
  check(cudaEventRecord(sent_, src_stream), "marking the copy");
  check(cudaSetDevice(to_), "selecting the receiving GPU");
  check(cudaStreamWaitEvent(dst_stream, sent_, 0), "waiting for the copy");
  if (route_ == Route::Host) {
    check(cudaMemcpyAsync(dst, bounce_.as<void>(), bytes, cudaMemcpyHostToDevice, dst_stream), "the copy from the host");
  }
}

std::string HiddenStateLink::route() const {
  switch (route_) {
    case Route::SameGpu: return "on one GPU";
    case Route::Peer: return "peer to peer";
    case Route::Host: return no_peer_;
  }
  return "?";
}

}  // namespace nt
