#include "backend/cuda/weights/hybrid_pass.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/llama_ops.h"

namespace nt {

HybridPass::HybridPass(std::unique_ptr<HostLayers> layers, CpuPassPlan passes, LayerStreamer& streamer)
    : layers_(std::move(layers)), passes_(std::move(passes)), streamer_(streamer) {}

HybridPass::~HybridPass() {
  if (passes_run_ == 0) return;
  std::fprintf(stderr, "hybrid: %lld CPU layers, %lld passes, %.2f ms a pass and %.2f ms a layer computing them (%d threads)\n",
               static_cast<long long>(layers_->count()), static_cast<long long>(passes_run_),
               seconds_ / double(passes_run_) * 1e3, seconds_ / double(layers_run_) * 1e3, layers_->threads());
}

std::string HybridPass::describe() const {
  std::string wider;
  for (const CpuPassShare& w : passes_.wider) wider += fmt::format(", {} up to {}", w.layers, w.max_tokens);
  return fmt::format("{} computed on the CPU in passes of up to {} tokens{}, {} threads", layers_->count(), passes_.all_up_to,
                     wider, layers_->threads());
}

void HybridPass::begin(int64_t n, const ChunkRows& chunk, cudaStream_t stream) {
  const int64_t share = passes_.share(n, layers_->count());
  all_on_host_ = share == layers_->count();
  computed_ = false;
  ranks_ = spread_ranks(layers_->count(), share);
  rows_.clear();
  for (const ChunkSequence& s : chunk.seqs) HostLayers::append_page_rows(*chunk.pages, s.seq, s.first_pos, s.rows, rows_);
  if (!all_on_host_) layers_->before_gpu_pass(rows_, stream);
}

bool HybridPass::computes(int64_t l) const {
  return layers_->computes(l) && std::binary_search(ranks_.begin(), ranks_.end(), layers_->rank(l));
}

void HybridPass::run(std::span<const int32_t> layers, int64_t n, const ChunkRows& chunk, float* x, cudaStream_t stream) {
  const int64_t floats = n * layers_->config().dim;
  copy_floats(x, layers_->host_x_on_device(), floats, stream);
  NT_CUDA_CHECK(cudaStreamSynchronize(stream));
  runs_.clear();
  for (const ChunkSequence& s : chunk.seqs) {
    runs_.push_back({s.seq, s.first_row, s.rows, s.first_pos, s.stepwise, s.tree_start >= 0});
  }
  for (const int32_t l : layers) {
    const auto begin = std::chrono::steady_clock::now();
    layers_->run(l, runs_, n, *chunk.pages, chunk.host_trees);
    const auto end = std::chrono::steady_clock::now();
    seconds_ += std::chrono::duration<double>(end - begin).count();
    streamer_.host_span(fmt::format("CPU layer {}", l), begin, end);
  }
  layers_run_ += int64_t(layers.size());
  computed_ = true;
  copy_floats(layers_->host_x_on_device(), x, floats, stream);
}

void HybridPass::end(cudaStream_t stream) {
  if (all_on_host_) {
    layers_->after_host_pass(rows_);
  } else {
    layers_->after_gpu_pass(rows_, ranks_, stream);
  }
  if (computed_) ++passes_run_;
}

}  // namespace nt
