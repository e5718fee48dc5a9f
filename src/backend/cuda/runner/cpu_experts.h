// The experts a pass misses in VRAM that the CPU computes from their pinned
// copy (ExpertStore::host_layer) instead of copying them over the link,
// while the GPU computes the hits and the link copies the other misses, so
// that the link and the cores finish together. Which ones: the misses with
// the fewest rows first, as long as the CPU's predicted time stays within
// the link's for the rest (the hybrid split's reasoning, expert by expert).
// Both predictions come from measured rates: the link's from the store's
// first copies at load, the CPU's from a probe at load and then its own runs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/moe_ffn.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/weights/expert_store.h"
#include "model/arch/model_spec.h"
#include "planning/expert_plan.h"

namespace nt {

class CpuExperts {
 public:
  // Passes of up to max_rows rows; threads 0: one a physical core.
  CpuExperts(const ModelSpec& spec, const ExpertStore& store, ExpertMisses policy, int64_t max_rows, int threads);

  int64_t max_rows() const { return max_rows_; }
  // Pinned [max_rows][dim]: the pass's normed rows, copied down before split().
  float* host_rows() const { return rows_.as<float>(); }
  // Pinned [max_rows][dim]: compute()'s sums, to copy up.
  const float* host_sums() const { return sums_.as<float>(); }

  // Of the layer's chosen experts (`needed`, ascending; expert e's (row,
  // choice) pairs are routed[start[e]] to routed[start[e + 1] - 1]), those
  // the GPU computes (the hits and the misses the link copies) and those the CPU does.
  void split(int64_t layer, std::span<const int32_t> needed, std::span<const int64_t> start);
  std::span<const int32_t> on_gpu() const { return on_gpu_; }
  std::span<const int32_t> on_cpu() const { return on_cpu_; }

  // host_sums()[row] = the sum over on_cpu()'s experts, ascending, of each
  // pair's weight (weights[pair], pair = row * k + choice) times the expert
  // on host_rows()[row], for the n rows.
  void compute(int64_t layer, std::span<const int64_t> start, const int32_t* routed, const float* weights, int64_t n);

  // "misses split between the link and the CPU (16 threads, 61.3 GB/s at load)".
  std::string describe() const;

 private:
  // A miss of the layer on either side, at the rates measured so far.
  MissCosts costs(int64_t layer) const;

  const ModelSpec& spec_;
  const ExpertStore& store_;
  ExpertMisses policy_;
  int64_t max_rows_;
  cpu::ThreadPool pool_;
  cpu::MoeFfn ffn_;
  PinnedBuffer rows_, sums_;
  double link_gbps_ = 0, cpu_gbps_ = 0, probed_gbps_ = 0;
  std::vector<int32_t> on_gpu_, on_cpu_;
  std::vector<std::pair<int64_t, int32_t>> misses_;  // (rows, expert) of the layer at hand
  std::vector<cpu::MoeFfn::Routed> routed_;
};

}  // namespace nt
