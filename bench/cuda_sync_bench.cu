// What a dependency between two steps of decode costs on the GPU, two ways:
// a kernel boundary (a captured graph of empty kernels, programmatic
// dependent launch as the engine launches them) and a grid-wide counter that
// a persistent kernel's blocks bump and spin on (bench/cuda_NOTES.md: the
// persistent decode kernel design). Both with one to eight blocks of 128
// threads per multiprocessor, and with the same warps in fewer, larger
// blocks (does a boundary cost per block or per warp?); microseconds per step.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/launch.cuh"
#include "event_timing.h"
#include "grid_counter.cuh"

namespace nt::cuda {
namespace {

__global__ void empty_step_kernel() {
  allow_dependents();
  wait_for_inputs();
}

// PRECOND: all blocks resident at once; *counter == 0 at launch.
__global__ void counter_steps_kernel(unsigned* counter, int steps) {
  for (int step = 1; step <= steps; ++step) {
    __syncthreads();
    count_block_done(counter);
    wait_for_count(counter, unsigned(step) * gridDim.x, 20);
    __syncthreads();
  }
}

}  // namespace

void bench_step_sync(int multiprocessors) {
  constexpr int kSteps = 256;
  cudaStream_t stream;
  NT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer counter(4, "step counter");
  fmt::print("\n== cost of one dependent step, us ({} steps; {} SMs)\n{:>16} {:>16} {:>14} {:>14}\n", kSteps, multiprocessors,
             "blocks per SM", "threads a block", "graph + PDL", "grid counter");
  const std::pair<int, int> shapes[] = {{1, 128}, {2, 128}, {4, 128}, {8, 128}, {1, 256}, {1, 512}, {2, 512}, {1, 1024}};
  for (const auto [per_sm, threads] : shapes) {
    const dim3 grid(unsigned(multiprocessors * per_sm)), block{unsigned(threads)};
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    NT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kSteps; ++i) launch_kernel(empty_step_kernel, grid, block, 0, stream);
    NT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    NT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    float graph_ms = 1e30f, counter_ms = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {  // best of 5 after the first (warm-up) pass
      const float g = bench::event_ms(stream, [&] { NT_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
      NT_CUDA_CHECK(cudaMemsetAsync(counter.get(), 0, 4, stream));
      const float c = bench::event_ms(stream, [&] {
        counter_steps_kernel<<<grid, block, 0, stream>>>(counter.as<unsigned>(), kSteps);
        NT_CUDA_CHECK_LAUNCH();
      });
      if (rep > 0) graph_ms = std::min(graph_ms, g), counter_ms = std::min(counter_ms, c);
    }
    fmt::print("{:>16} {:>16} {:>14.2f} {:>14.2f}\n", per_sm, threads, graph_ms * 1e3f / kSteps, counter_ms * 1e3f / kSteps);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

}  // namespace nt::cuda
