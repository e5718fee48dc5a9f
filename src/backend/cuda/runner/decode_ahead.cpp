#include "backend/cuda/runner/decode_ahead.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace nt {

DecodeAhead::DecodeAhead()
    : picks_(4 * kRing, "greedy picks"), chain_(sizeof(SampleChain), "sampling parameters"), step_done_(kRing) {
  for (cudaEvent_t& e : step_done_) NT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

DecodeAhead::~DecodeAhead() {
  for (cudaEvent_t e : step_done_) cudaEventDestroy(e);
}

int64_t DecodeAhead::run(cudaStream_t stream, int64_t pos, int64_t max_steps, const std::function<void(int64_t)>& queue,
                         const std::function<bool(int32_t)>& on_token, const std::function<void()>& on_poisoned) {
  const auto queue_step = [&](int64_t step) {
    queue(step);
    NT_CUDA_CHECK(cudaEventRecord(step_done_[size_t(step % kRing)], stream));
  };
  const volatile int32_t* picks = picks_.as<int32_t>();
  const int64_t ahead = std::min(kAhead, max_steps);
  int64_t handed = 0;
  try {
    for (int64_t step = 0; step < ahead; ++step) queue_step(step);
    while (handed < max_steps) {
      NT_CUDA_CHECK(cudaEventSynchronize(step_done_[size_t(handed % kRing)]));
      const int32_t pick = picks[(pos + handed) % kRing];
      if (pick < 0) {  // the step found its row poisoned or all -inf and did not advance
        NT_CUDA_CHECK(cudaStreamSynchronize(stream));
        on_poisoned();
      }
      if (handed + ahead < max_steps) queue_step(handed + ahead);
      ++handed;
      if (!on_token(pick)) break;
    }
  } catch (...) {
    cudaStreamSynchronize(stream);  // the queued steps use the buffers the next call writes
    throw;
  }
  NT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return handed;
}

}  // namespace nt
