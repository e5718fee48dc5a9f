#include "engine/hybrid_split.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/tuning.h"
#include "engine/cpu_probe.h"
#include "engine/gpu_probe.h"
#include "storage/disk_bench.h"

namespace nt {
namespace {

constexpr double kCpuProbeSeconds = 0.3;  // per pass size
constexpr int64_t kCpuProbeBatch = 8;
constexpr uint64_t kDiskProbeBytes = 256ull << 20;

// The rates the planner weighs, and the link's alone for the log.
struct MeasuredRates {
  HybridRates rates;
  double link_alone_gbps = 0;
};

// The CPU layers of a split compute while the link copies the streamed ones
// out of the same host memory, so the CPU and the link are timed together
// (on the H200 host the CPU layers of a split ran at ~70 GB/s of weights
// beside the copies, against ~85 alone).
MeasuredRates measure_rates(const GgufFile& file, const ModelSpec& config, const PlacementPlan& base, int threads) {
  MeasuredRates m;
  HybridRates& rates = m.rates;
  m.link_alone_gbps = measure_h2d_gbps();
  if (base.count(Tier::Disk) > 0) rates.link.disk_gbps = measure_disk_read(file.path(), kDiskProbeBytes).gbps;
  rates.link.h2d_gbps = measure_h2d_gbps_beside([&] {
    rates.cpu.decode_gbps = measure_cpu_rate(file, 1, kCpuProbeSeconds, threads).gbps;
    rates.cpu.batch_gbps = measure_cpu_rate(file, kCpuProbeBatch, kCpuProbeSeconds, threads).gbps;
    rates.cpu.wide_gbps = measure_cpu_rate(file, kHybridMaxTokens, kCpuProbeSeconds, threads).gbps;
  });
  if (rates.link.h2d_gbps <= 0) rates.link.h2d_gbps = m.link_alone_gbps;  // no copy finished beside the probes
  rates.cpu.batch_tokens = kCpuProbeBatch;
  rates.cpu.wide_tokens = kHybridMaxTokens;
  rates.ring_slots = hybrid_ring_slots();
  rates.gpu_gbps = measure_gpu_layer_gbps();
  rates.hidden_bytes_per_token = uint64_t(config.dim) * 4;
  return m;
}

}  // namespace

int hybrid_ring_slots() { return tuning().hybrid_ring_slots; }

HybridSplit choose_hybrid_split(const GgufFile& file, const ModelFootprint& model, const PlacementPlan& base,
                                std::optional<int64_t> forced, int threads) {
  HybridSplit split;
  const int64_t ram_layers = base.count(Tier::Ram);
  if (forced && (*forced < 0 || *forced > ram_layers)) {
    fail("--cpu-layers {}: the CPU computes layers held in host RAM, and this placement has {} (0 to {})", *forced,
         ram_layers, ram_layers);
  }
  if (ram_layers == 0 || (forced && *forced == 0)) return split;
  const ModelSpec config = read_model_spec(file.header(), file.path());
  const MeasuredRates measured = measure_rates(file, config, base, threads);
  const HybridRates& rates = measured.rates;
  const HybridPlan decode = plan_hybrid(model, base, rates, 1);
  split.cpu_layers = forced ? *forced : decode.count(Path::Cpu);
  const double streaming = spread_cpu_layers(model, base, rates, 1, 0).step.seconds();
  const double hybrid = spread_cpu_layers(model, base, rates, 1, split.cpu_layers).step.seconds();
  split.passes = plan_cpu_passes(model, base, rates, split.cpu_layers, kHybridMaxTokens);
  std::string wider;
  for (const CpuPassShare& w : split.passes.wider) wider += fmt::format("{} of them up to {} tokens, ", w.layers, w.max_tokens);
  split.summary = fmt::format(
      "hybrid split{}: the CPU computes {} of {} RAM-tier layers in passes of up to {} tokens ({}none in wider ones); "
      "decode predicted {:.1f} ms a token against {:.1f} ms streaming them (measured, the link and the CPU together: link "
      "{:.1f} GB/s, CPU {:.1f} GB/s of weights at 1 token, {:.1f} at {} and {:.1f} at {}; the link alone {:.1f} GB/s; GPU "
      "layers {:.0f} GB/s{})",
      forced ? " (--cpu-layers)" : " (auto)", split.cpu_layers, ram_layers, split.passes.all_up_to, wider, hybrid * 1e3,
      streaming * 1e3, rates.link.h2d_gbps, rates.cpu.decode_gbps, rates.cpu.batch_gbps, rates.cpu.batch_tokens,
      rates.cpu.wide_gbps, rates.cpu.wide_tokens, measured.link_alone_gbps, rates.gpu_gbps,
      rates.link.disk_gbps > 0 ? fmt::format(", storage {:.2f} GB/s", rates.link.disk_gbps) : std::string());
  return split;
}

}  // namespace nt
