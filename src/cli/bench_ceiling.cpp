#include "cli/bench_ceiling.h"

#include <fmt/core.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/cpu_probe.h"
#include "engine/gpu_probe.h"
#include "model/tensor_names.h"

namespace nt::cli {
namespace {

constexpr double kProbeSeconds = 0.3;
constexpr uint64_t kHostReadBytes = 1ull << 30;  // past every cache

void print_host_weight_rate(const ModelRunner& runner, const GgufFile& file, const std::vector<int32_t>& resident,
                            double seconds_per_token, int threads) {
  const int64_t layers = runner.config().n_layers;
  std::vector<bool> in_vram(size_t(layers), false);
  for (const int32_t l : resident) in_vram[size_t(l)] = true;
  uint64_t host_bytes = 0;
  for (const GgufTensorInfo& t : file.header().tensors) {
    const std::optional<int64_t> l = layer_of_tensor(t.name);
    if (l && *l < layers && !in_vram[size_t(*l)]) host_bytes += t.n_bytes;
  }
  const double reached = double(host_bytes) / seconds_per_token / 1e9;
  const double link = measure_h2d_gbps();
  const double read = measure_host_read(kHostReadBytes, kProbeSeconds, threads).gbps;
  fmt::print("host-side weights: {:.2f} GB a token ({} of {} layers not in VRAM) at {:.1f} ms a token = {:.1f} GB/s; "
             "measured now: link {:.1f} GB/s + host memory read {:.1f} GB/s = {:.1f} GB/s ({:.0f}%)\n",
             double(host_bytes) / 1e9, layers - int64_t(resident.size()), layers, seconds_per_token * 1e3, reached, link,
             read, link + read, 100.0 * reached / (link + read));
}

}  // namespace

std::optional<MemoryCeiling> measure_memory_ceiling(const ModelRunner& runner, const std::vector<int>& gpus, int threads) {
  if (gpus.size() > 1 || int64_t(runner.resident_layers().size()) < runner.config().n_layers) return std::nullopt;
  if (!gpus.empty()) return MemoryCeiling{fmt::format("GPU {}'s device-to-device copy", gpus[0]), measure_gpu_copy_gbps(gpus[0])};
  const CpuRateProbe read = measure_host_read(kHostReadBytes, kProbeSeconds, threads);
  return MemoryCeiling{fmt::format("host memory read ({} threads)", read.threads), read.gbps};
}

void print_decode_ceiling(const ModelRunner& runner, const GgufFile& file, const std::vector<int>& gpus,
                          const DecodeStep& step, int threads) {
  if (step.seconds <= 0) return;
  const std::vector<int32_t> resident = runner.resident_layers();
  if (int64_t(resident.size()) < runner.config().n_layers) {
    return print_host_weight_rate(runner, file, resident, step.seconds, threads);
  }
  const std::optional<MemoryCeiling> ceiling = measure_memory_ceiling(runner, gpus, threads);
  if (!ceiling) return;
  const double reached = step.bytes / step.seconds / 1e9;
  fmt::print("decode ceiling: weights + KV {:.3g} GB a token at {:.3f} ms a token = {:.1f} GB/s; measured now: {} "
             "{:.1f} GB/s ({:.0f}%)\n",
             step.bytes / 1e9, step.seconds * 1e3, reached, ceiling->what, ceiling->gbps, 100.0 * reached / ceiling->gbps);
}

}  // namespace nt::cli
