#include "backend/cuda/runner/cpu_experts.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace nt {
namespace {

// The link's rate when the load measured none (no slot to copy into).
constexpr double kAssumedLinkGbps = 20.0;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

CpuExperts::CpuExperts(const ModelSpec& spec, const ExpertStore& store, ExpertMisses policy, int64_t max_rows, int threads)
    : spec_(spec),
      store_(store),
      policy_(policy),
      max_rows_(max_rows),
      pool_(threads),
      ffn_(spec, max_rows),
      rows_(size_t(max_rows * spec.dim) * 4, "the experts' rows for the CPU"),
      sums_(size_t(max_rows * spec.dim) * 4, "the CPU experts' sums"),
      link_gbps_(store.link_gbps() > 0 ? store.link_gbps() : kAssumedLinkGbps) {
  // The CPU's first rate: layer 0's expert 0 over one row, the second of two
  // runs (the first pays for the page walks).
  std::fill_n(host_rows(), spec.dim, 0.01f);
  const cpu::MoeFfn::Routed row{0, 0.0f};
  double seconds = 0;
  for (int run = 0; run < 2; ++run) {
    const auto start = std::chrono::steady_clock::now();
    ffn_.add_expert(spec.layers[0], store.host_layer(0), 0, {&row, 1}, host_rows(), sums_.as<float>(), pool_);
    seconds = seconds_since(start);
  }
  cpu_gbps_ = probed_gbps_ = double(store.copy_bytes(0)) / std::max(seconds, 1e-7) / 1e9;
}

std::string CpuExperts::describe() const {
  const std::string cpu = fmt::format("the CPU ({} threads, {:.1f} GB/s at load)", pool_.size(), probed_gbps_);
  if (policy_ == ExpertMisses::Cpu) return "misses on " + cpu;
  return "misses split between the link and " + cpu;  // the store's description gives the link's rate
}

MissCosts CpuExperts::costs(int64_t layer) const {
  const double bytes = double(store_.copy_bytes(layer));
  return {.copy_seconds = bytes / (link_gbps_ * 1e9), .cpu_row_seconds = bytes / (cpu_gbps_ * 1e9)};
}

void CpuExperts::split(int64_t layer, std::span<const int32_t> needed, std::span<const int64_t> start) {
  on_gpu_.clear();
  on_cpu_.clear();
  misses_.clear();
  for (const int32_t e : needed) {
    if (store_.in_vram(layer, e)) {
      on_gpu_.push_back(e);
    } else {
      misses_.push_back({start[size_t(e) + 1] - start[size_t(e)], e});
    }
  }
  split_misses(misses_, costs(layer), policy_, on_cpu_, on_gpu_);
  // Each side takes its experts in ascending order, as a row adds them.
  std::sort(on_gpu_.begin(), on_gpu_.end());
  std::sort(on_cpu_.begin(), on_cpu_.end());
}

void CpuExperts::compute(int64_t layer, std::span<const int64_t> start, const int32_t* routed, const float* weights,
                         int64_t n) {
  const LayerSpec& spec = spec_.layers[size_t(layer)];
  const int64_t k = spec.moe.n_experts_used;
  float* sums = sums_.as<float>();
  std::fill_n(sums, n * spec_.dim, 0.0f);
  const auto begin = std::chrono::steady_clock::now();
  const MissCosts layer_costs = costs(layer);
  double predicted = 0;
  for (const int32_t e : on_cpu_) {
    routed_.clear();
    for (int64_t p = start[size_t(e)]; p < start[size_t(e) + 1]; ++p) routed_.push_back({routed[p] / k, weights[routed[p]]});
    ffn_.add_expert(spec, store_.host_layer(layer), e, routed_, host_rows(), sums, pool_);
    predicted += layer_costs.cpu_seconds(int64_t(routed_.size()));
  }
  // The rate follows what the runs take (other work on the cores, the caches).
  const double seconds = seconds_since(begin);
  if (!on_cpu_.empty() && seconds > 0) cpu_gbps_ = 0.75 * cpu_gbps_ + 0.25 * cpu_gbps_ * predicted / seconds;
}

}  // namespace nt
