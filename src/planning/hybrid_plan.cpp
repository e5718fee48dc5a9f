#include "planning/hybrid_plan.h"

#include <algorithm>

#include "core/error.h"

namespace nt {

double CpuRate::seconds(uint64_t bytes, int64_t tokens) const {
  if (decode_gbps <= 0) fail("a CPU decode rate is needed to predict CPU layers");
  const double one = 1.0 / (decode_gbps * 1e9);  // seconds per weight byte at one token
  double per_token = 0;                          // added seconds per weight byte per further token
  if (batch_tokens > 1) {
    if (batch_gbps <= 0) fail("a CPU rate at {} tokens per pass is needed to predict CPU layers", batch_tokens);
    per_token = std::max(0.0, (1.0 / (batch_gbps * 1e9) - one) / double(batch_tokens - 1));
  }
  const int64_t t = std::max<int64_t>(tokens, 1);
  if (wide_tokens > batch_tokens && batch_tokens > 1 && t > batch_tokens) {
    if (wide_gbps <= 0) fail("a CPU rate at {} tokens per pass is needed to predict CPU layers", wide_tokens);
    const double at_batch = 1.0 / (batch_gbps * 1e9);
    const double wide_per_token = std::max(0.0, (1.0 / (wide_gbps * 1e9) - at_batch) / double(wide_tokens - batch_tokens));
    return double(bytes) * (at_batch + double(t - batch_tokens) * wide_per_token);
  }
  return double(bytes) * (one + double(t - 1) * per_token);
}

std::string_view path_name(Path path) {
  switch (path) {
    case Path::Vram: return "vram";
    case Path::Ram: return "ram";
    case Path::Disk: return "disk";
    case Path::Cpu: return "cpu";
  }
  return "?";
}

double HybridStep::overlapped() const { return std::max({link + link_idle, disk, cpu + gpu_streamed}); }

int64_t HybridPlan::count(Path p) const { return std::count(path.begin(), path.end(), p); }

HybridStep predict_hybrid_step(const ModelFootprint& model, const std::vector<Path>& path, const HybridRates& rates,
                               int64_t tokens) {
  if (path.size() != model.layers.size()) fail("{} layer paths for {} layers", path.size(), model.layers.size());
  uint64_t resident = model.output_head_bytes, streamed = 0, streamed_resident = 0, disk = 0, cpu_layers = 0;
  int64_t streamed_layers = 0;
  std::vector<double> cpu_layer_seconds;
  HybridStep s;
  for (size_t i = 0; i < path.size(); ++i) {
    const LayerFootprint& l = model.layers[i];
    switch (path[i]) {
      case Path::Vram: resident += l.resident_bytes; break;
      case Path::Disk: disk += l.streamed_bytes; [[fallthrough]];
      case Path::Ram:
        streamed += l.streamed_bytes;
        streamed_resident += l.resident_bytes;
        ++streamed_layers;
        break;
      case Path::Cpu:
        cpu_layer_seconds.push_back(rates.cpu.seconds(l.resident_bytes, tokens));
        s.cpu += cpu_layer_seconds.back();
        ++cpu_layers;
        break;
    }
  }
  const bool uses_link = streamed > 0 || cpu_layers > 0;
  if (uses_link && rates.link.h2d_gbps <= 0) fail("a host-to-device speed is needed to predict streamed and CPU layers");
  if (disk > 0 && rates.link.disk_gbps <= 0) fail("a storage read speed is needed to predict disk layers");
  if (rates.gpu_gbps <= 0) fail("a GPU compute rate is needed to predict a pass");
  const double h2d = rates.link.h2d_gbps * 1e9;  // 0 only when nothing crosses the link
  s.gpu_resident = double(resident) / (rates.gpu_gbps * 1e9);
  s.gpu_streamed = double(streamed_resident) / (rates.gpu_gbps * 1e9);
  s.link = streamed > 0 ? double(streamed) / h2d : 0;
  s.disk = disk > 0 ? double(disk) / (rates.link.disk_gbps * 1e9) : 0;
  if (rates.ring_slots > 0 && streamed_layers > 0) {
    const double ahead = double(rates.ring_slots) * s.link / double(streamed_layers);  // copies a full ring holds
    for (const double c : cpu_layer_seconds) s.link_idle += std::max(0.0, c - ahead);
  }
  s.handoff = cpu_layers > 0 ? 2.0 * double(cpu_layers) *
                                   (rates.handoff_latency_s +
                                    double(std::max<int64_t>(tokens, 1)) * double(rates.hidden_bytes_per_token) / h2d)
                             : 0;
  return s;
}

std::vector<Path> spread_cpu_paths(const PlacementPlan& base, int64_t cpu_layers) {
  std::vector<size_t> ram;  // indices of the RAM tier, in order
  std::vector<Path> path;
  for (size_t i = 0; i < base.layer_tier.size(); ++i) {
    const Tier t = base.layer_tier[i];
    path.push_back(t == Tier::Vram ? Path::Vram : t == Tier::Ram ? Path::Ram : Path::Disk);
    if (t == Tier::Ram) ram.push_back(i);
  }
  if (cpu_layers < 0 || cpu_layers > int64_t(ram.size())) {
    fail("{} CPU layers asked for, but the CPU computes only layers held in host RAM: 0 to {} here", cpu_layers,
         ram.size());
  }
  // With k <= M/2 no two CPU layers are adjacent, so each has a streamed
  // layer after it whose copy runs while it computes.
  for (const int64_t r : spread_ranks(int64_t(ram.size()), cpu_layers)) path[ram[size_t(r)]] = Path::Cpu;
  return path;
}

std::vector<int64_t> spread_ranks(int64_t n, int64_t k) {
  if (k < 0 || k > n) fail("{} of {} spread: 0 to {}", k, n, n);
  std::vector<int64_t> ranks;
  for (int64_t j = 0; j < k; ++j) ranks.push_back((2 * j + 1) * n / (2 * k));
  return ranks;
}

std::vector<Path> cpu_share_paths(const PlacementPlan& base, int64_t cpu_layers, int64_t share) {
  std::vector<Path> path = spread_cpu_paths(base, cpu_layers);
  std::vector<size_t> cpu;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == Path::Cpu) cpu.push_back(i);
  }
  std::vector<bool> kept(cpu.size(), false);
  for (const int64_t r : spread_ranks(cpu_layers, share)) kept[size_t(r)] = true;
  for (size_t r = 0; r < cpu.size(); ++r) {
    if (!kept[r]) path[cpu[r]] = Path::Ram;
  }
  return path;
}

CpuPassPlan plan_cpu_passes(const ModelFootprint& model, const PlacementPlan& base, const HybridRates& rates,
                            int64_t cpu_layers, int64_t widest) {
  CpuPassPlan plan;
  if (cpu_layers <= 0) return plan;
  plan.all_up_to = 1;
  for (int64_t t = 2; t <= widest; t *= 2) {
    CpuPassShare best{t, 0};
    double best_seconds = predict_hybrid_step(model, cpu_share_paths(base, cpu_layers, 0), rates, t).seconds();
    for (int64_t k = 1; k <= cpu_layers; ++k) {
      const double seconds = predict_hybrid_step(model, cpu_share_paths(base, cpu_layers, k), rates, t).seconds();
      if (seconds < best_seconds) best = {t, k}, best_seconds = seconds;
    }
    if (best.layers == 0) break;
    if (best.layers == cpu_layers && plan.wider.empty()) {
      plan.all_up_to = t;
    } else {
      plan.wider.push_back(best);
    }
  }
  return plan;
}

int64_t CpuPassPlan::share(int64_t tokens, int64_t cpu_layers) const {
  if (tokens <= all_up_to) return cpu_layers;
  for (const CpuPassShare& w : wider) {
    if (tokens <= w.max_tokens) return w.layers;
  }
  return 0;
}

int64_t CpuPassPlan::widest() const {
  int64_t most = all_up_to;
  for (const CpuPassShare& w : wider) {
    if (w.layers > 0) most = w.max_tokens;
  }
  return most;
}

void CpuPassPlan::check(int64_t cpu_layers) const {
  if (cpu_layers > 0 && all_up_to < 1) {
    fail("{} CPU layers computed in passes of up to {} tokens: at least 1", cpu_layers, all_up_to);
  }
  int64_t narrower = all_up_to;
  for (const CpuPassShare& w : wider) {
    if (w.max_tokens <= narrower || w.layers < 0 || w.layers > cpu_layers) {
      fail("the CPU's share of passes of up to {} tokens: {} of its {} layers, in passes wider than {} (0 to {} layers)",
           w.max_tokens, w.layers, cpu_layers, narrower, cpu_layers);
    }
    narrower = w.max_tokens;
  }
}

HybridPlan spread_cpu_layers(const ModelFootprint& model, const PlacementPlan& base, const HybridRates& rates,
                             int64_t tokens, int64_t cpu_layers) {
  HybridPlan plan;
  plan.tokens = tokens;
  plan.path = spread_cpu_paths(base, cpu_layers);
  plan.step = predict_hybrid_step(model, plan.path, rates, tokens);
  return plan;
}

std::vector<HybridPlan> hybrid_alternatives(const ModelFootprint& model, const PlacementPlan& base,
                                            const HybridRates& rates, int64_t tokens) {
  std::vector<HybridPlan> all;
  for (int64_t k = 0; k <= base.count(Tier::Ram); ++k) all.push_back(spread_cpu_layers(model, base, rates, tokens, k));
  return all;
}

HybridPlan plan_hybrid(const ModelFootprint& model, const PlacementPlan& base, const HybridRates& rates, int64_t tokens) {
  std::vector<HybridPlan> all = hybrid_alternatives(model, base, rates, tokens);
  size_t best = 0;
  for (size_t k = 1; k < all.size(); ++k) {
    if (all[k].step.seconds() < all[best].step.seconds()) best = k;
  }
  return std::move(all[best]);
}

}  // namespace nt
