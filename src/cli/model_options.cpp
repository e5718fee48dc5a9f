#include "cli/model_options.h"

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "cli/number_checks.h"
#include "cli/plan_hybrid.h"
#include "cli/plan_multi_gpu.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/default_model.h"
#include "engine/gpu_list.h"
#include "engine/open_model.h"
#include "model/arch/model_spec.h"
#include "storage/io_reader.h"

namespace nt::cli {

void add_model_options(CLI::App& cmd, ModelOptions& o) {
  cmd.add_option("-m,--model", o.model, "GGUF model (default: SmolLM2-135M-Instruct from the models cache)");
  cmd.add_option("-c,--ctx-size", o.context, "Context length in tokens (0: the model's, at most 4096)")->check(non_negative());
  cmd.add_option("-t,--threads", o.threads, "CPU threads (0: physical cores)")->transform(at_most_hardware_threads());
  cmd.add_option("--device", o.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  cmd.add_flag("--kv-f32", o.kv_f32, "Keep the KV cache in F32 instead of F16");
  cmd.add_flag("--swa-full", o.swa_full,
               "Sliding-window layers (Gemma 3, gpt-oss) keep every position instead of only their window: more "
               "memory, and a saved sequence state then holds its cache, not only its tokens");
  cmd.add_option("--kv-pool", o.kv_pool,
                 "KV cache positions shared by all sequences, taken 32 at a time as they grow (default: every sequence's "
                 "whole context; batch --parallel N holds N)")
      ->check(non_negative());
  cmd.add_option("--vram-budget", o.vram_budget,
                 "CUDA: VRAM to use, e.g. 24GiB; layers beyond it stream (default: free VRAM); with --gpus one for each, "
                 "e.g. 24GiB,20GiB, or one for all");
  cmd.add_option("--ram-budget", o.ram_budget, "CUDA: host RAM to pin for streamed layers, e.g. 48GiB (default: from MemAvailable)");
  cmd.add_option("--io", o.io, "CUDA: file reader for loading and streaming layers: auto, uring, cufile or mmap (auto loads a file the page cache holds through mmap, and otherwise reads with uring)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "uring", "cufile", "mmap"}));
  cmd.add_option("--cpu-layers", o.cpu_layers,
                 "CUDA: of the layers in pinned RAM, how many the CPU computes in place while the link streams the "
                 "others: N, 0 (stream them all) or auto (the planner's choice from rates measured at load, when it "
                 "predicts a gain)")
      ->capture_default_str();
  cmd.add_option("--trace", o.trace, "CUDA: write a Chrome-trace JSON of layer streaming, or of a mixture of experts' copies and CPU expert work, to this file");
  cmd.add_option("--expert-counts", o.expert_counts,
                 "CUDA: a mixture of experts starts with the experts these counts (calibrate-experts) chose most in VRAM")
      ->check(CLI::ExistingFile);
  cmd.add_option("--expert-misses", o.expert_misses,
                 "CUDA: where a mixture's experts that miss the VRAM cache compute: auto (split between copies over the "
                 "link and the CPU by their measured rates, so both finish together), link (all copied) or cpu (all "
                 "computed by the CPU from pinned RAM)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "link", "cpu"}));
  cmd.add_option("--gpus", o.gpus,
                 "CUDA: the GPUs to run on, e.g. 0,1: one stage of consecutive layers on each, in order (a GPU listed "
                 "twice holds two stages; default: GPU 0 alone)");
  cmd.add_option("--split", o.split, "With --gpus: layer (a range of layers per GPU), tensor (every layer's heads and FFN "
                                     "columns cut across the GPUs, summed over NCCL) or auto (the default: the faster by the "
                                     "planner, from rates measured at load)");
  cmd.add_option("--nccl-id", o.nccl_id,
                 "With --split tensor: run rank 0 here and the other ranks as processes of their own (`ntransformer rank "
                 "--rank R` with the same -m, --gpus and --nccl-id), joined through the NCCL id written to this file");
  cmd.add_option("--join-timeout", o.join_timeout_s, "With --nccl-id: seconds to wait for the other ranks to join")
      ->check(positive())
      ->capture_default_str();
  cmd.add_option("--n-gpu-layers,--gpu-layers", o.gpu_layers,
                 "As llama.cpp's -ngl: 0 runs on the CPU; all (or at least the model's layers) on the GPU with the "
                 "layers that fit resident and the rest streamed (the default); a count between is refused: the "
                 "budget flags place layers here (also -ngl)");
  // --help lists the options that act only on the GPU apart.
  for (const char* name : {"--vram-budget", "--ram-budget", "--io", "--cpu-layers", "--trace", "--expert-counts", "--gpus",
                           "--split", "--nccl-id", "--join-timeout", "--n-gpu-layers"}) {
    cmd.get_option(name)->group("CUDA options");
  }
}

namespace {
bool g_seed_given = false;  // one command runs per process

// "15043+1" or "15043-100": llama.cpp's --logit-bias.
LogitBias parse_logit_bias(const std::string& item) {
  const size_t sign = item.find_first_of("+-");
  LogitBias b;
  const auto bad = [&] { fail("--logit-bias {}: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043-100", item); };
  if (sign == 0 || sign == std::string::npos) bad();
  const auto [token_end, token_error] = std::from_chars(item.data(), item.data() + sign, b.token);
  if (token_error != std::errc() || token_end != item.data() + sign || b.token < 0) bad();
  try {
    size_t used = 0;
    b.bias = std::stof(item.substr(sign), &used);
    if (used != item.size() - sign || !std::isfinite(b.bias)) bad();
  } catch (const std::logic_error&) {
    bad();
  }
  return b;
}
}  // namespace

void add_sampling_options(CLI::App& cmd, SamplingParams& p) {
  namespace l = limits;
  cmd.add_option("--temp", p.temperature, "Temperature (0: greedy)")->capture_default_str()->check(within(l::kTemperature));
  cmd.add_option("--top-k", p.top_k, "Top-k (0: off)")->capture_default_str()->check(within(l::kTopK));
  cmd.add_option("--top-p", p.top_p, "Top-p (1: off)")->capture_default_str()->check(within(l::kTopP));
  cmd.add_option("--min-p", p.min_p, "Min-p (0: off)")->capture_default_str()->check(within(l::kMinP));
  cmd.add_option("--repeat-penalty", p.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str()
      ->check(within(l::kRepeatPenalty));
  cmd.add_option("--repeat-last-n", p.repeat_last_n, "Penalty window in tokens (0: off, -1: all)")
      ->capture_default_str()
      ->check(within(l::kRepeatLastN));
  cmd.add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty")
      ->capture_default_str()
      ->check(within(l::kFrequencyPenalty));
  cmd.add_option("--presence-penalty", p.presence_penalty, "Presence penalty")
      ->capture_default_str()
      ->check(within(l::kPresencePenalty));
  cmd.add_option_function<std::vector<std::string>>(
         "--logit-bias",
         [&p](const std::vector<std::string>& items) {
           for (const std::string& item : items) p.logit_bias.push_back(parse_logit_bias(item));
         },
         "Add BIAS to a token's logit before sampling, as TOKEN_ID+BIAS or TOKEN_ID-BIAS (15043-100 all but bans "
         "token 15043); repeatable")
      ->type_name("TOKEN(+|-)BIAS");
  p.seed = random_seed();
  cmd.add_option_function<std::string>(
         "-s,--seed",
         [&p](const std::string& text) {
           const std::optional<uint64_t> seed = parse_seed(text, "--seed");
           g_seed_given = seed.has_value();
           p.seed = seed ? *seed : random_seed();
         },
         "Random seed (default -1: a random one, printed so that the run can be repeated)");
}

void announce_seed(const SamplingParams& p) {
  if (!g_seed_given && p.temperature > 0) fmt::print(stderr, "seed: {} (random; --seed {} repeats this run)\n", p.seed, p.seed);
}

// -ngl as the reference engine means it, where that meaning exists here.
Device device_for_gpu_layers(const ModelOptions& o, Device device) {
  if (o.gpu_layers.empty() || o.gpu_layers == "all" || o.gpu_layers == "auto") return device;
  int64_t layers = 0;
  try {
    size_t used = 0;
    layers = std::stoll(o.gpu_layers, &used);
    if (used != o.gpu_layers.size() || layers < 0) throw std::invalid_argument("");
  } catch (const std::exception&) {
    fail("-ngl {}: expected a number of layers, all or auto", o.gpu_layers);
  }
  if (layers == 0) {
    if (device == Device::Cuda) fail("-ngl 0 with --device cuda: -ngl 0 runs on the CPU; drop one of them");
    return Device::Cpu;
  }
  const auto file = GgufFile::open(o.model.empty() ? default_model_path() : o.model);
  const int64_t model_layers = file->header().get_int(architecture_prefix(file->header()) + "block_count", 0);
  if (layers >= model_layers) return device;
  fail("-ngl {}: the model has {} layers, and here layers are placed by memory, not by count: the layers that fit "
       "--vram-budget (default: the free VRAM) stay resident and the rest stream from --ram-budget or the disk, and "
       "--cpu-layers computes some of those on the CPU; give --vram-budget SIZE, or -ngl all",
       layers, model_layers);
}

OpenModelOptions open_options(const ModelOptions& o) {
  OpenModelOptions open;
  open.path = o.model;
  open.device = device_for_gpu_layers(o, parse_device(o.device, "--device"));
  open.context = o.context;
  open.sequences = o.sequences;
  open.kv_pool = o.kv_pool;
  open.threads = o.threads;
  open.kv_f32 = o.kv_f32;
  open.swa_full = o.swa_full;
  if (!o.gpus.empty()) open.gpus = parse_gpu_ids(o.gpus, "--gpus");
  if (!o.split.empty()) {
    if (open.gpus.empty()) fail("--split needs --gpus, e.g. --gpus 0,1 --split layer");
    open.split = parse_split(o.split);
  }
  if (!o.nccl_id.empty() && open.split != Split::Tensor) {
    fail("--nccl-id {}: ranks in processes of their own run the tensor split: add --split tensor", o.nccl_id);
  }
  open.nccl_id_file = o.nccl_id;
  open.join_timeout_s = o.join_timeout_s;
  if (open.gpus.size() > 1 && !o.vram_budget.empty()) {
    open.vram_budgets = parse_per_gpu_sizes(o.vram_budget, open.gpus, "--vram-budget");
  } else if (!o.vram_budget.empty()) {
    open.vram_budget = parse_size(o.vram_budget, "--vram-budget");
  }
  if (!o.ram_budget.empty()) open.ram_budget = parse_size(o.ram_budget, "--ram-budget");
  open.io = parse_io_backend(o.io);
  open.trace_path = o.trace;
  open.draft_model = o.draft_model;
  open.expert_counts = o.expert_counts;
  open.expert_misses = o.expert_misses == "link" ? ExpertMisses::Link
                       : o.expert_misses == "cpu" ? ExpertMisses::Cpu
                                                  : ExpertMisses::Auto;
  open.cpu_layers = parse_cpu_layers(o.cpu_layers);
  return open;
}

LoadProgress::LoadProgress(const ModelOptions& o, OpenModelOptions& open) : line_("loading weights", 1.0) {
  if (!open.nccl_id_file.empty()) {  // rank 0 waits in NCCL until every other rank has joined
    const size_t ranks = open.gpus.size();
    fmt::print(stderr, "rank 0 of {}: waiting for the other ranks; start {} as `ntransformer rank{} --gpus {} --rank {} --nccl-id {}`\n",
               ranks, ranks == 2 ? "it" : "each", o.model.empty() ? "" : " -m " + o.model, o.gpus,
               ranks == 2 ? "1" : fmt::format("R (1 to {})", ranks - 1), o.nccl_id);
  }
  open.on_load_progress = [this](uint64_t done, uint64_t total) { line_.update(done, total); };
}

void LoadProgress::done(const OpenedModel& opened) const {
  line_.finish();
  if (!opened.hybrid_summary.empty()) fmt::print(stderr, "{}\n", opened.hybrid_summary);
  if (!opened.split_summary.empty()) fmt::print(stderr, "{}\n", opened.split_summary);
  fmt::print(stderr, "model: {} on {}\n", opened.path, opened.runner->description());
  const int64_t trained = opened.runner->config().context_length;
  if (opened.runner->context_size() > trained) {  // allowed, as llama.cpp allows it, but positions past it are untrained
    fmt::print(stderr, "warning: a context of {} is past the {} tokens the model was trained on; output past them may degrade\n",
               opened.runner->context_size(), trained);
  }
}

OpenedModel load_model(const ModelOptions& o) {
  OpenModelOptions open = open_options(o);
  const LoadProgress progress(o, open);
  OpenedModel opened = open_model(open);
  progress.done(opened);
  return opened;
}

}  // namespace nt::cli
