#include "backend/cuda/multi_gpu/nccl_rank_channel.h"

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace nt {

NcclRankChannel::NcclRankChannel(NcclComm& comm) : comm_(comm), buffer_(4096, "the tensor split's message buffer") {
  NT_CUDA_CHECK(cudaSetDevice(comm.gpu()));
  NT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

NcclRankChannel::~NcclRankChannel() {
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclRankChannel::broadcast(void* host, size_t bytes, const char* what) {
  NT_CUDA_CHECK(cudaSetDevice(comm_.gpu()));
  if (buffer_.size() < bytes) buffer_ = DeviceBuffer(bytes, "the tensor split's message buffer");
  if (rank() == 0) NT_CUDA_CHECK(cudaMemcpyAsync(buffer_.get(), host, bytes, cudaMemcpyHostToDevice, stream_));
  comm_.broadcast_from_first(buffer_.get(), bytes, stream_);
  // Before a copy into pageable memory, which would wait inside the driver, unwatched.
  comm_.wait(stream_, what, rank() == 0 ? std::function<void()>() : watch_sender_);
  if (rank() != 0) NT_CUDA_CHECK(cudaMemcpy(host, buffer_.get(), bytes, cudaMemcpyDeviceToHost));
}

void NcclRankChannel::send(std::span<const uint8_t> message) {
  if (rank() != 0) fail("rank {} sent a tensor-split message: only rank 0 sends", rank());
  uint64_t bytes = message.size();
  broadcast(&bytes, sizeof bytes, "sending a tensor-split message's length");
  broadcast(const_cast<uint8_t*>(message.data()), bytes, "sending a tensor-split message");
}

std::vector<uint8_t> NcclRankChannel::receive() {
  if (rank() == 0) fail("rank 0 waited for a tensor-split message: rank 0 only sends");
  uint64_t bytes = 0;
  broadcast(&bytes, sizeof bytes, "waiting for rank 0's next message");
  std::vector<uint8_t> message(bytes);
  broadcast(message.data(), bytes, "receiving a tensor-split message");
  return message;
}

int NcclRankChannel::count_failed(bool failed) {
  NT_CUDA_CHECK(cudaSetDevice(comm_.gpu()));
  float count = failed ? 1.0f : 0.0f;
  NT_CUDA_CHECK(cudaMemcpyAsync(buffer_.get(), &count, sizeof count, cudaMemcpyHostToDevice, stream_));
  comm_.all_reduce_sum(buffer_.as<float>(), buffer_.as<float>(), 1, stream_);
  comm_.wait(stream_, "counting the ranks that failed to load");
  NT_CUDA_CHECK(cudaMemcpy(&count, buffer_.get(), sizeof count, cudaMemcpyDeviceToHost));
  return int(count);
}

}  // namespace nt
