// A pass's part on the host in a hybrid split: which of the CPU layers the
// pass of n tokens gives the host (CpuPassPlan::share), the KV mirror kept whole around it
// (HostLayers), the hidden state's trips to the host and back, and the time
// the host's layers take, logged when the runner goes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/decoder_layer.h"
#include "backend/cuda/runner/layer_pass.h"
#include "backend/cuda/weights/host_layers.h"
#include "backend/cuda/weights/layer_stream.h"
#include "planning/hybrid_plan.h"
#include "runtime/kv_pages.h"

namespace nt {

class HybridPass {
 public:
  // `streamer` carries the other layers and traces the host's spans.
  HybridPass(std::unique_ptr<HostLayers> layers, CpuPassPlan passes, LayerStreamer& streamer);
  ~HybridPass();  // logs the host's time per pass and per layer
  HybridPass(const HybridPass&) = delete;
  HybridPass& operator=(const HybridPass&) = delete;

  HostLayers& layers() { return *layers_; }
  const HostLayers& layers() const { return *layers_; }
  // "N computed on the CPU in passes of up to ..." for the runner's description.
  std::string describe() const;

  // Before a pass of n tokens over `chunk`'s rows, ahead of anything queued
  // on `stream`: picks the host's share and brings the GPU's copy of the
  // host layers' caches up to what the pass attends to.
  void begin(int64_t n, const ChunkRows& chunk, cudaStream_t stream);
  // Whether the host computes layer l in the running pass.
  bool computes(int64_t l) const;
  // Consecutive layers of the running pass the host computes, over the first
  // n rows of the device's hidden state x: it crosses once each way.
  void run(std::span<const int32_t> layers, int64_t n, const ChunkRows& chunk, float* x, cudaStream_t stream);
  // After the pass's layers are queued: the caches' rows move so that both
  // copies hold what the pass wrote.
  void end(cudaStream_t stream);

  // A chunk's token-tree rows for the host layers (ChunkRows::host_trees).
  cpu::TreeRows& trees() { return trees_; }

 private:
  std::unique_ptr<HostLayers> layers_;
  CpuPassPlan passes_;
  LayerStreamer& streamer_;
  // The running pass.
  bool all_on_host_ = false;
  bool computed_ = false;
  std::vector<int64_t> ranks_;  // its host layers, by rank (spread_ranks)
  std::vector<HostLayers::PageRows> rows_;
  std::vector<SequenceRun> runs_;
  cpu::TreeRows trees_;
  // Over all passes.
  double seconds_ = 0;        // the host's layer compute
  int64_t passes_run_ = 0;    // passes in which it computed layers
  int64_t layers_run_ = 0;    // layers it computed, over those passes
};

}  // namespace nt
