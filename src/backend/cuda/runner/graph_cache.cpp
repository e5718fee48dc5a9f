#include "backend/cuda/runner/graph_cache.h"

#include "backend/cuda/cuda_check.h"

namespace nt {
namespace {

// The work `queue` puts on `stream`, captured and instantiated as a graph.
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& queue) {
  cudaGraph_t graph = nullptr;
  NT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    queue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  NT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  NT_CUDA_CHECK(err);
  return exec;
}

}  // namespace

GraphCache::~GraphCache() {
  for (const auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
}

cudaGraphExec_t GraphCache::get(int64_t key, cudaStream_t stream, const std::function<void()>& queue) {
  if (const auto it = graphs_.find(key); it != graphs_.end()) return it->second;
  const cudaGraphExec_t exec = capture_graph(stream, queue);
  graphs_.emplace(key, exec);
  return exec;
}

}  // namespace nt
