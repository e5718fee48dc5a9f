// Captured CUDA graphs by key, each captured on first use from the work a
// function queues on a stream and replayed after: the runner's one-token
// decode steps (by kind and key range) and batched decode steps (by
// sequence count). The graphs are destroyed with the cache.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>

namespace nt {

class GraphCache {
 public:
  GraphCache() = default;
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The graph under `key`, captured from what `queue` puts on `stream` when there is none yet.
  cudaGraphExec_t get(int64_t key, cudaStream_t stream, const std::function<void()>& queue);

 private:
  std::map<int64_t, cudaGraphExec_t> graphs_;
};

}  // namespace nt
