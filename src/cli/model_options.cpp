#include "cli/model_options.h"

#include <fmt/core.h>

#include "backend/cpu/cpu_llama.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/default_model.h"
#include "storage/io_reader.h"
#include "storage/size_parse.h"
#ifdef NT_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_runner.h"
#endif

namespace nt::cli {

void add_model_options(CLI::App& cmd, ModelOptions& o) {
  cmd.add_option("-m,--model", o.model, "GGUF model (default: SmolLM2-135M-Instruct from the models cache)");
  cmd.add_option("-c,--ctx-size", o.context, "Context length in tokens (0: the model's, at most 4096)")->check(CLI::NonNegativeNumber);
  cmd.add_option("-t,--threads", o.threads, "CPU threads (0: physical cores)")->check(CLI::NonNegativeNumber);
  cmd.add_option("--device", o.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  cmd.add_flag("--kv-f32", o.kv_f32, "Keep the KV cache in F32 instead of F16");
  cmd.add_option("--vram-budget", o.vram_budget, "CUDA: VRAM to use, e.g. 24GiB; layers beyond it stream (default: free VRAM)");
  cmd.add_option("--ram-budget", o.ram_budget, "CUDA: host RAM to pin for streamed layers, e.g. 48GiB (default: from MemAvailable)");
  cmd.add_option("--io", o.io, "CUDA: file reader for loading and streaming layers: auto, uring, cufile or mmap (auto loads a file the page cache holds through mmap, and otherwise reads with uring)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "uring", "cufile", "mmap"}));
  cmd.add_option("--trace", o.trace, "CUDA: write a Chrome-trace JSON of layer streaming to this file");
}

void add_sampling_options(CLI::App& cmd, SamplingParams& p) {
  cmd.add_option("--temp", p.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd.add_option("--top-k", p.top_k, "Top-k (0: off)")->capture_default_str();
  cmd.add_option("--top-p", p.top_p, "Top-p (1: off)")->capture_default_str();
  cmd.add_option("--min-p", p.min_p, "Min-p (0: off)")->capture_default_str();
  cmd.add_option("--repeat-penalty", p.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd.add_option("--repeat-last-n", p.repeat_last_n, "Penalty window in tokens (0: off, -1: all)")->capture_default_str();
  cmd.add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd.add_option("--presence-penalty", p.presence_penalty, "Presence penalty")->capture_default_str();
  cmd.add_option("--seed", p.seed, "Random seed")->capture_default_str();
}

LoadedModel load_model(const ModelOptions& o) {
  LoadedModel m;
  const std::string path = o.model.empty() ? default_model_path() : o.model;
  m.file = GgufFile::open(path);
  std::string device = o.device;
#ifdef NT_HAVE_CUDA
  if (device == "auto") {
    std::string why;
    device = probe_cuda_device(0, &why) ? "cuda" : "cpu";
  }
  if (device == "cuda") {
    const int64_t trained = m.file->header().get_int("llama.context_length", 4096);
    CudaRunnerOptions cuda;
    if (!o.vram_budget.empty()) cuda.vram_budget = parse_size(o.vram_budget, "--vram-budget");
    if (!o.ram_budget.empty()) cuda.ram_budget = parse_size(o.ram_budget, "--ram-budget");
    cuda.io = parse_io_backend(o.io);
    cuda.trace_path = o.trace;
    ProgressLine progress("loading weights onto the GPU", 1.0);
    cuda.on_load_progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
    m.runner = make_cuda_runner(*m.file, o.context > 0 ? o.context : std::min<int64_t>(trained, 4096), cuda);
    progress.finish();
  }
#else
  if (device == "cuda") fail("--device cuda: this build has no CUDA backend (configure with -DNT_CUDA=ON)");
#endif
  if (!m.runner) {
    CpuRunnerOptions cpu;
    cpu.context = o.context;
    cpu.threads = o.threads;
    cpu.kv_f32 = o.kv_f32;
    m.runner = make_cpu_runner(m.file, cpu);
  }
  fmt::print(stderr, "model: {} on {}\n", path, m.runner->description());
  return m;
}

}  // namespace nt::cli
