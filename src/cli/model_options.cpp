#include "cli/model_options.h"

#include <fmt/core.h>

#include "backend/cpu/cpu_llama.h"
#include "core/error.h"
#include "engine/default_model.h"
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
    m.runner = make_cuda_runner(*m.file, o.context > 0 ? o.context : std::min<int64_t>(trained, 4096));
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
