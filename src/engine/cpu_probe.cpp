#include "engine/cpu_probe.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "model/tensor_names.h"

namespace nt {

CpuRateProbe measure_cpu_rate(const GgufFile& file, int64_t tokens, double seconds, int threads,
                              uint64_t min_working_set) {
  // Whole matrices of whole layers, called as the runner calls them: on the
  // 16-core H200 host, 16 MiB pieces of rows measured 38.7 GB/s where the
  // CPU layers of the hybrid split then ran at ~70 (docs/PERFORMANCE.md).
  std::vector<cpu::WeightView> matrices;
  CpuRateProbe probe;
  int64_t widest = 0, tallest = 0;
  std::optional<int64_t> last_layer;
  for (const GgufTensorInfo& t : file.header().tensors) {
    const std::optional<int64_t> layer = layer_of_tensor(t.name);
    if (!layer || t.shape.size() != 2 || !tensor_type_info(t.type).weight_format) continue;
    if (probe.working_set >= min_working_set && layer != last_layer) break;
    last_layer = layer;
    matrices.push_back(cpu::WeightView::dense(file.data(t), t.type, t.n_rows(), t.row_length(), t.name));
    widest = std::max(widest, t.row_length());
    tallest = std::max(tallest, t.n_rows());
    probe.working_set += t.n_bytes;
  }
  if (matrices.empty()) fail("the model has no layer matrices to measure the CPU on");

  cpu::ThreadPool pool(threads);
  probe.threads = pool.size();
  const int n = int(std::max<int64_t>(tokens, 1));
  std::vector<float> x(size_t(n) * size_t(widest), 0.25f), y(size_t(n) * size_t(tallest));
  // One untimed token over every matrix pages the mapping in and wakes the pool.
  for (const auto& w : matrices) cpu::matmul(w, x.data(), y.data(), 1, pool);
  auto compute = [&](const cpu::WeightView& w) {
    cpu::matmul(w, x.data(), y.data(), n, pool);
    return uint64_t(w.rows) * w.row_stride;
  };
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (size_t i = 0;; i = (i + 1) % matrices.size()) {
    probe.bytes += compute(matrices[i]);
    probe.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (probe.seconds >= seconds) break;
  }
  probe.gbps = double(probe.bytes) / probe.seconds / 1e9;
  return probe;
}

CpuRateProbe measure_host_read(uint64_t bytes, double seconds, int threads) {
  const size_t words = std::max<size_t>(1, size_t(bytes / sizeof(uint64_t)));
  std::vector<uint64_t> buffer(words, 1);  // written, so every page is backed before timing
  cpu::ThreadPool pool(threads);
  std::vector<uint64_t> sums(size_t(pool.size()));
  auto pass = [&] {
    pool.run([&](int i, int n) {
      const size_t begin = words * size_t(i) / size_t(n), end = words * size_t(i + 1) / size_t(n);
      uint64_t a = 0, b = 0, c = 0, d = 0;  // four chains keep the loads independent
      size_t w = begin;
      for (; w + 4 <= end; w += 4) {
        a += buffer[w];
        b += buffer[w + 1];
        c += buffer[w + 2];
        d += buffer[w + 3];
      }
      for (; w < end; ++w) a += buffer[w];
      sums[size_t(i)] += a + b + c + d;
    });
  };
  CpuRateProbe probe;
  probe.threads = pool.size();
  probe.working_set = words * sizeof(uint64_t);
  pass();
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  do {
    pass();
    probe.bytes += probe.working_set;
    probe.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  } while (probe.seconds < seconds);
  // The sums are kept so the reads are not optimized away.
  uint64_t total = 0;
  for (const uint64_t s : sums) total += s;
  if (total == 0) fail("the host read probe summed nothing");
  probe.gbps = double(probe.bytes) / probe.seconds / 1e9;
  return probe;
}

}  // namespace nt
