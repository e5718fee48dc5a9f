#include "backend/cuda/hidden_state_link.h"

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gpu_set.h"
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
  NT_CUDA_CHECK(cudaSetDevice(from_));
  switch (route_) {
    case Route::SameGpu: NT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, src_stream)); break;
    case Route::Peer: NT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, to_, src, from_, bytes, src_stream)); break;
    case Route::Host: NT_CUDA_CHECK(cudaMemcpyAsync(bounce_.as<void>(), src, bytes, cudaMemcpyDeviceToHost, src_stream)); break;
  }
  NT_CUDA_CHECK(cudaEventRecord(sent_, src_stream));
  NT_CUDA_CHECK(cudaSetDevice(to_));
  NT_CUDA_CHECK(cudaStreamWaitEvent(dst_stream, sent_, 0));
  if (route_ == Route::Host) {
    NT_CUDA_CHECK(cudaMemcpyAsync(dst, bounce_.as<void>(), bytes, cudaMemcpyHostToDevice, dst_stream));
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
