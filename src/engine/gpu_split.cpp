#include "engine/gpu_split.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/gpu_probe.h"
#include "storage/disk_bench.h"

namespace nt {
namespace {

constexpr uint64_t kDiskProbeBytes = 256ull << 20;

bool streams_from_disk(const std::vector<SplitCandidate>& placed) {
  for (const SplitCandidate& c : placed) {
    if (!c.plan) continue;
    for (const GpuPlacement& g : c.plan->gpus) {
      if (g.plan.count(Tier::Disk) > 0) return true;
    }
  }
  return false;
}

void measure_rates(const GgufFile& file, const ModelFootprint& model, MultiGpuRequest& r) {
  for (GpuResources& g : r.gpus) {
    g.h2d_gbps = measure_h2d_gbps(g.id);
    g.gpu_gbps = measure_gpu_layer_gbps(g.id);
  }
  // The slowest neighbour link bounds the hand-offs and the ring all-reduce.
  for (size_t g = 0; g + 1 < r.gpus.size(); ++g) {
    const double gbps = measure_gpu_to_gpu_gbps(r.gpus[g].id, r.gpus[g + 1].id);
    r.peer_gbps = g == 0 ? gbps : std::min(r.peer_gbps, gbps);
  }
  if (streams_from_disk(split_candidates(model, r, false))) r.disk_gbps = measure_disk_read(file.path(), kDiskProbeBytes).gbps;
}

}  // namespace

GpuSplitChoice choose_gpu_split(const GgufFile& file, const ModelFootprint& model, MultiGpuRequest request,
                                std::optional<Split> split) {
  if (split) return {place_multi_gpu(model, request, *split), {}};
  measure_rates(file, model, request);
  const std::vector<SplitCandidate> candidates = split_candidates(model, request);
  const SplitCandidate& best = fastest_split(candidates);
  std::string predicted;
  for (const SplitCandidate& c : candidates) {
    predicted += fmt::format("{}{} {}", predicted.empty() ? "" : ", ", split_name(c.split),
                             c.plan ? fmt::format("{:.2f} ms", c.plan->seconds * 1e3) : "cannot (" + c.error + ")");
  }
  std::string gpus;
  for (const GpuResources& g : request.gpus) {
    gpus += fmt::format("{}GPU {} H2D {:.1f} GB/s, layers {:.0f} GB/s", gpus.empty() ? "" : "; ", g.id, g.h2d_gbps, g.gpu_gbps);
  }
  GpuSplitChoice choice{*best.plan, {}};
  choice.summary = fmt::format("--split auto: {} split, predicted pass of one token {} (measured: {}; GPU to GPU {:.1f} GB/s{})",
                               split_name(best.split), predicted, gpus, request.peer_gbps,
                               request.disk_gbps > 0 ? fmt::format(", storage {:.2f} GB/s", request.disk_gbps) : "");
  return choice;
}

}  // namespace nt
