#include "cli/bench_host_weights.h"

#include <fmt/core.h>

#include <optional>
#include <vector>

#include "engine/cpu_probe.h"
#include "engine/gpu_probe.h"
#include "model/tensor_names.h"

namespace nt::cli {

void print_host_weight_rate(const ModelRunner& runner, const GgufFile& file, double seconds_per_token, int threads) {
  const int64_t layers = runner.config().n_layers;
  const std::vector<int32_t> resident = runner.resident_layers();
  if (int64_t(resident.size()) >= layers || seconds_per_token <= 0) return;
  std::vector<bool> in_vram(size_t(layers), false);
  for (const int32_t l : resident) in_vram[size_t(l)] = true;
  uint64_t host_bytes = 0;
  for (const GgufTensorInfo& t : file.header().tensors) {
    const std::optional<int64_t> l = layer_of_tensor(t.name);
    if (l && *l < layers && !in_vram[size_t(*l)]) host_bytes += t.n_bytes;
  }
  const double reached = double(host_bytes) / seconds_per_token / 1e9;
  constexpr double kProbeSeconds = 0.3;
  const double link = measure_h2d_gbps();
  const double read = measure_host_read(1ull << 30, kProbeSeconds, threads).gbps;
  fmt::print("host-side weights: {:.2f} GB a token ({} of {} layers not in VRAM) at {:.1f} ms a token = {:.1f} GB/s; "
             "measured now: link {:.1f} GB/s + host memory read {:.1f} GB/s = {:.1f} GB/s ({:.0f}%)\n",
             double(host_bytes) / 1e9, layers - int64_t(resident.size()), layers, seconds_per_token * 1e3, reached, link,
             read, link + read, 100.0 * reached / (link + read));
}

}  // namespace nt::cli
