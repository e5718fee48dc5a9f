// `ntransformer plan -m MODEL [--vram-budget 24GiB] [--ram-budget 48GiB] ...`:
// which layers would stay in VRAM, stream from pinned RAM, or stream from
// storage; the bytes each token moves, and the time that takes at the link
// speeds (measured where possible, else given or clearly labelled as assumed);
// then which RAM layers the CPU would compute while the link streams the rest.
// With --gpus 0,1: the placement over several GPUs for --split layer|tensor|auto.
// With --draft-model FILE: the draft's VRAM comes out of the budget first.
#include <fmt/core.h>

#include <algorithm>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/plan_experts.h"
#include "cli/plan_hybrid.h"
#include "cli/plan_multi_gpu.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "engine/cpu_probe.h"
#include "engine/default_model.h"
#include "engine/expert_calibration.h"
#include "engine/gpu_list.h"
#include "engine/gpu_probe.h"
#include "engine/hybrid_split.h"
#include "gguf/gguf_file.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "planning/device_memory_plan.h"
#include "planning/multi_gpu_plan.h"
#include "planning/placement.h"
#include "runtime/kernel_shapes.h"
#include "runtime/kv_pages.h"
#include "storage/disk_bench.h"
#include "storage/host_memory.h"
#include "storage/io_reader.h"
namespace nt::cli {
namespace {

// PCIe 4.0 x16 moves about 25 GB/s of pinned H2D copies in practice (32 GB/s raw).
constexpr double kNominalH2dGbps = 25.0;
// The attention split count, and so the activation arena, depends on the SM
// count; without a GPU to ask, the H200's.
constexpr int kAssumedGpuSms = 132;
// Seconds the CPU rate measurement runs at each pass size.
constexpr double kCpuProbeSeconds = 0.4;
// Far beyond the last-level caches, so the host read probe measures DRAM.
constexpr uint64_t kHostReadProbeBytes = 1ull << 30;

// The VRAM a plan assumes without a GPU to ask or a --vram-budget: the 24 GB
// consumer card most users run on.
constexpr uint64_t kAssumedVramBytes = uint64_t(24) << 30;

struct PlanOptions {
  std::string model;
  std::string vram_budget, ram_budget;
  int64_t context = 0;
  int64_t sequences = 1;
  int64_t kv_pool = 0;               // KV positions shared by the sequences; 0: each one's whole context
  bool swa_full = false;             // sliding-window layers keep every position, as run --swa-full
  int64_t batch = kDefaultMaxBatch;  // the runner's prefill chunk
  int ring = 2;
  int gpu_sms = 0;
  std::string io = "auto";
  double h2d_gbps = 0, disk_gbps = 0;
  uint64_t bench_mib = 256;
  std::string cpu_layers = "auto";
  int64_t batch_tokens = 16;
  double cpu_gbps = 0, cpu_batch_gbps = 0, cpu_wide_gbps = 0, gpu_gbps = 0;
  int threads = 0;
  bool project = false;
  std::string gpus, split;
  double peer_gbps = 0;
  std::string draft_model;
  std::string expert_counts;
};

// "KV cache (F16, 4 x 4096 tokens)", or with --kv-pool "(F16, a pool of 8192
// tokens for 4 sequences)"; `prefix` goes first in the brackets.
std::string kv_cache_label(const std::string& what, const std::string& prefix, const PlanOptions& o, int64_t context) {
  if (o.kv_pool > 0) return fmt::format("{} ({}a pool of {} tokens for {} sequences)", what, prefix, o.kv_pool, o.sequences);
  if (o.sequences > 1) return fmt::format("{} ({}{} x {} tokens)", what, prefix, o.sequences, context);
  return fmt::format("{} ({}{} tokens)", what, prefix, context);
}

std::string layer_span(const PlacementPlan& p, Tier tier) {
  const auto first = std::find(p.layer_tier.begin(), p.layer_tier.end(), tier);
  if (first == p.layer_tier.end()) return "-";
  const auto last = std::find(p.layer_tier.rbegin(), p.layer_tier.rend(), tier);
  const auto a = first - p.layer_tier.begin(), b = p.layer_tier.rend() - last - 1;
  return a == b ? fmt::format("{}", a) : fmt::format("{}-{}", a, b);
}

// Storage read speed: given, or measured on the model file.
double disk_gbps(const PlanOptions& o, const std::string& path, const ReaderOptions& reader_options, IoBackend io,
                 std::string* source) {
  if (o.disk_gbps > 0) {
    *source = "given";
    return o.disk_gbps;
  }
  ReaderOptions bench_options = reader_options;
  bench_options.device_destinations = false;  // the benchmark reads into host memory
  if (io == IoBackend::CuFile) bench_options.backend = IoBackend::Auto;
  const DiskBench b = measure_disk_read(path, o.bench_mib << 20, bench_options);
  *source = fmt::format("measured: {} of the model file, {}{}", format_size(b.bytes), b.reader,
                        b.direct ? "" : "; through the page cache, NOT the device's speed");
  return b.gbps;
}

// The CPU's rate at one token, at batch_tokens per pass and at the widest
// pass a hybrid split weighs (kHybridMaxTokens): given, or timed
// on this model's own layers with cpu::matmul. With link_beside, the probes
// run while the link copies (as the runner's planner times them, the way a
// hybrid split runs both), and it gets the link's rate meanwhile.
CpuRate cpu_rate(const PlanOptions& o, const GgufFile& file, double* link_beside) {
  CpuRate rate{o.cpu_gbps, o.cpu_batch_gbps, o.batch_tokens};
  if (o.batch_tokens > 1 && o.batch_tokens < kHybridMaxTokens) {
    rate.wide_gbps = o.cpu_wide_gbps;
    rate.wide_tokens = kHybridMaxTokens;
  }
  std::vector<std::string> lines;
  auto probe = [&](int64_t tokens, double& gbps) {
    if (gbps > 0) {
      lines.push_back(fmt::format("  CPU at {:>3} token{}  {:>9.2f} GB/s of weights (given)", tokens, tokens == 1 ? " " : "s", gbps));
      return;
    }
    const CpuRateProbe m = measure_cpu_rate(file, tokens, kCpuProbeSeconds, o.threads);
    gbps = m.gbps;
    lines.push_back(fmt::format(
        "  CPU at {:>3} token{}  {:>9.2f} GB/s of weights (measured: cpu::matmul, {} threads, {} of layer matrices cycled, "
        "{} in {:.2f} s{}{})",
        tokens, tokens == 1 ? " " : "s", gbps, m.threads, format_size(m.working_set), format_size(m.bytes), m.seconds,
        link_beside ? ", the link copying meanwhile" : "",
        m.working_set < kCpuProbeWorkingSet ? "; a model this small may measure the caches" : ""));
  };
  auto probes = [&] {
    probe(1, rate.decode_gbps);
    if (o.batch_tokens > 1) probe(o.batch_tokens, rate.batch_gbps);
    if (rate.wide_tokens > 0) probe(rate.wide_tokens, rate.wide_gbps);
  };
  if (link_beside) {
    *link_beside = measure_h2d_gbps_beside(probes);
  } else {
    probes();
  }
  for (const std::string& line : lines) fmt::print("{}\n", line);
  return rate;
}

// The SM count the memory plan is computed for: given, the GPU's, or assumed and said so.
int gpu_sms(const PlanOptions& o, const std::optional<GpuSummary>& gpu, std::string* source) {
  if (o.gpu_sms > 0) {
    *source = "given";
    return o.gpu_sms;
  }
  if (gpu) {
    *source = gpu->name;
    return gpu->multiprocessors;
  }
  *source = fmt::format("ASSUMED: the H200's {}, no GPU to ask; pass --gpu-sms", kAssumedGpuSms);
  return kAssumedGpuSms;
}

// The --draft-model's VRAM beside a model of `context` positions for
// `sequences` sequences sharing a pool of kv_pool positions (0: each its
// context), as the runner plans it (its layer reads through `reader_options`).
DraftVram plan_draft(const PlanOptions& o, int64_t context, int64_t sequences, int64_t kv_pool, const ReaderOptions& reader_options,
                     int sms) {
  const auto file = GgufFile::open(o.draft_model);
  const ModelSpec config = read_model_spec(file->header(), o.draft_model);
  const ModelWeights weights = load_model_weights(*file, config);
  const OpenedReader opened = open_file_reader(o.draft_model, reader_options);
  const std::vector<LayerRead> reads = plan_layer_reads(file->header(), opened.reader->alignment(), o.draft_model);
  return draft_vram(o.draft_model, config, weights, reads, context, int(sequences), sms, kv_pool);
}

// The CUDA runner's buffers for `sequences` sequences sharing a pool of
// kv_pool positions (0: each its context): the code it allocates from. A
// split over several GPUs keeps every position of every layer.
RunnerBuffers plan_buffers(const ModelSpec& config, const ModelWeights& weights, int64_t context, const PlanOptions& o,
                           int64_t sequences, int64_t kv_pool, int sms, bool split = false) {
  return runner_buffers(config, weights, context, kv_cache_context(context), o.batch, int(sequences), sms, kv_pool,
                        !o.swa_full && !split);
}

// Below the KV cache's row, where the sliding-window layers keep their window only.
void print_window_note(const ModelSpec& config, int64_t context, const PlanOptions& o) {
  const KvWindowPlan w = device_kv_window(config, kv_cache_context(context), int(o.sequences), o.kv_pool, o.batch, !o.swa_full);
  if (w.window == 0) return;
  fmt::print("    of which {} sliding-window layers keep {} tokens (a window of {} and more; --swa-full: all)\n",
             w.window_layers, w.pages * kKvTile, w.window);
}

// The H2D link's rate: given, measured, or without a GPU assumed and said so.
double h2d_rate(const PlanOptions& o, bool have_gpu, std::string* source) {
  *source = "given";
  if (o.h2d_gbps > 0) return o.h2d_gbps;
  if (have_gpu) {
    *source = "measured: 256 MiB pinned copies";
    if (const double gbps = measure_h2d_gbps(); gbps > 0) return gbps;
  }
  *source = "ASSUMED: PCIe 4.0 x16 nominal, no GPU to measure; pass --h2d-gbps";
  return kNominalH2dGbps;
}

// The rate a GPU layer reads its resident weights: given, measured, or assumed and said so.
double gpu_layer_rate(const PlanOptions& o, const std::optional<GpuSummary>& gpu, std::string* source) {
  *source = "given";
  if (o.gpu_gbps > 0) return o.gpu_gbps;
  if (gpu) {
    *source = fmt::format("measured: {}'s device copies at the {:.0f}% the H200's resident 70B decode reached", gpu->name,
                          100 * kGpuLayerShareOfCopy);
    return measure_gpu_layer_gbps();
  }
  *source = "ASSUMED: the H200's resident 70B decode rate; pass --gpu-gbps";
  return kAssumedGpuLayerGbps;
}

struct PlanSource {
  const std::string& path;
  const GgufFile& file;
  const ModelSpec& config;
  int64_t context;
  const FileReader& reader;
  const ReaderOptions& reader_options;
  IoBackend io;
  const ModelWeights& weights;
  const std::vector<LayerRead>& reads;
  int sms;
};

// plan --gpus: budgets and rates per GPU (given, found on the GPUs, or
// assumed and said so), then the multi-GPU report.
void plan_gpus(const PlanOptions& o, const std::vector<int>& ids, bool have_gpu, const PlanSource& src,
               uint64_t ram_budget, const std::string& ram_source) {
  MultiGpuReportInput in;
  in.split = parse_split(o.split.empty() ? "auto" : o.split);
  std::vector<uint64_t> budgets;
  std::vector<GpuSummary> found;
  if (have_gpu) found = find_gpus(ids);  // an absent GPU is an error naming it
  if (!o.vram_budget.empty()) {
    budgets = parse_per_gpu_sizes(o.vram_budget, ids, "--vram-budget");
    in.budget_sources.assign(ids.size(), "given");
  } else if (have_gpu) {
    std::vector<uint64_t> free_bytes;
    for (const auto& g : found) {
      free_bytes.push_back(g.free_bytes);
      in.budget_sources.push_back(fmt::format("free on {} less the runner's margin", g.name));
    }
    budgets = free_vram_budgets(ids, free_bytes);  // as the pipeline runner takes them
  } else {
    budgets.assign(ids.size(), kAssumedVramBytes);
    in.budget_sources.assign(ids.size(), "ASSUMED: a 24 GiB card, no GPU to ask; pass --vram-budget");
  }
  const ModelFootprint model = device_footprint(src.config, src.weights, src.reads);
  in.model = &model;
  in.h2d_source = o.h2d_gbps > 0 ? "given" : have_gpu ? "measured: 256 MiB pinned copies" : "ASSUMED: PCIe 4.0 x16 nominal; pass --h2d-gbps";
  in.gpu_source = o.gpu_gbps > 0 ? "given" : "ASSUMED: the H200's resident 70B decode rate; pass --gpu-gbps";
  std::vector<GpuResources> gpus;
  for (size_t g = 0; g < ids.size(); ++g) {
    const double h2d = o.h2d_gbps > 0 ? o.h2d_gbps : have_gpu ? measure_h2d_gbps(ids[g]) : kNominalH2dGbps;
    gpus.push_back({ids[g], budgets[g], h2d, o.gpu_gbps > 0 ? o.gpu_gbps : kAssumedGpuLayerGbps});
  }
  // The placement the pipeline runner would make: the same request from the same buffers.
  in.request = device_multi_gpu_request(src.file.header(), src.config, model,
                                        plan_buffers(src.config, src.weights, src.context, o, o.sequences, o.kv_pool, src.sms,
                                                     true),
                                        std::move(gpus), ram_budget, o.ring);
  MultiGpuRequest& r = in.request;
  // The slowest link of the chain bounds the hand-offs and the ring all-reduce.
  if (o.peer_gbps > 0) {
    r.peer_gbps = o.peer_gbps;
    in.peer_source = "given";
  } else if (have_gpu && ids.size() > 1) {
    r.peer_gbps = measure_gpu_to_gpu_gbps(ids[0], ids[1]);
    for (size_t g = 1; g + 1 < ids.size(); ++g) r.peer_gbps = std::min(r.peer_gbps, measure_gpu_to_gpu_gbps(ids[g], ids[g + 1]));
    in.peer_source = "measured: 64 MiB copies between neighbours, the slowest";
  } else {
    r.peer_gbps = r.gpus[0].h2d_gbps / 2;
    in.peer_source = "ASSUMED: a bounce through host memory, two copies at half the H2D rate; pass --peer-gbps";
  }
  std::string disk_source;
  r.disk_gbps = disk_gbps(o, src.path, src.reader_options, src.io, &disk_source);

  fmt::print("model    {}\n         {} layers, {} heads ({} KV), FFN {}\n", src.path, src.config.n_layers,
             src.config.n_heads, src.config.n_kv_heads, src.config.ffn_dim);
  fmt::print("context  {} tokens, batches up to {}\n", src.context, o.batch);
  fmt::print("budgets  RAM {} ({}), shared by the GPUs\n", format_size(ram_budget), ram_source);
  fmt::print("disk     {:.2f} GB/s ({})\n", r.disk_gbps, disk_source);
  print_multi_gpu_plan(in);
}

void plan(const PlanOptions& o) {
  const std::string path = o.model.empty() ? default_model_path() : o.model;
  const auto file = GgufFile::open(path);
  const ModelSpec config = read_model_spec(file->header(), path);
  const int64_t context = o.context > 0 ? o.context : std::min<int64_t>(config.context_length, 4096);
  KvPages::check_pool(o.kv_pool, context);
  const IoBackend io = parse_io_backend(o.io);
  const std::optional<int64_t> cpu_layers = parse_cpu_layers(o.cpu_layers);
  const std::vector<int> gpu_ids = o.gpus.empty() ? std::vector<int>() : parse_gpu_ids(o.gpus, "--gpus");
  if (!o.split.empty() && gpu_ids.empty()) fail("--split needs --gpus, e.g. --gpus 0,1 --split auto");
  if (!o.draft_model.empty() && !gpu_ids.empty()) fail("--draft-model with --gpus: a draft model is planned on one GPU only");

  std::string no_gpu;
  const auto gpu = find_gpu(&no_gpu);

  ReaderOptions reader_options;
  reader_options.backend = io;
  reader_options.device_destinations = gpu.has_value();  // the streaming ring lives in VRAM
  const OpenedReader opened = open_file_reader(path, reader_options);
  const FileReader& reader = *opened.reader;
  const ModelWeights weights = load_model_weights(*file, config);
  const std::vector<LayerRead> reads = plan_layer_reads(file->header(), reader.alignment(), path);
  std::string sms_source;
  const int sms = gpu_sms(o, gpu, &sms_source);

  // Budgets.
  uint64_t ram_budget = 0;
  std::string ram_source;
  if (!o.ram_budget.empty()) {
    ram_budget = parse_size(o.ram_budget, "--ram-budget");
    ram_source = "given";
  } else {
    const RamBudget r = automatic_ram_budget(host_mem_available(), config, o.batch);
    ram_budget = r.budget;
    ram_source = fmt::format("MemAvailable {} - host buffers {} - 1/16 headroom {}", format_size(r.mem_available),
                             format_size(r.host_buffers), format_size(r.headroom));
  }
  if (!gpu_ids.empty() && config.has_experts()) {
    fail("--gpus: the layer and tensor splits run dense models only so far; plan this mixture of experts on one GPU");
  }
  if (!gpu_ids.empty()) {
    plan_gpus(o, gpu_ids, gpu.has_value(), {path, *file, config, context, reader, reader_options, io, weights, reads, sms}, ram_budget,
              ram_source);
    return;
  }
  uint64_t vram_budget = 0;
  std::string vram_source;
  if (!o.vram_budget.empty()) {
    vram_budget = parse_size(o.vram_budget, "--vram-budget");
    vram_source = "given";
  } else if (gpu) {
    vram_budget = gpu->free_bytes;
    vram_source = "free on " + gpu->name;
  } else {
    vram_budget = kAssumedVramBytes;
    vram_source = fmt::format("ASSUMED: a 24 GiB card, no GPU to ask ({}); pass --vram-budget", no_gpu);
  }

  // The CUDA runner's own placement: device-layout sizes and its buffers,
  // within what a draft model leaves of the budget.
  std::optional<DraftVram> draft, draft_one;
  if (!o.draft_model.empty()) {
    draft = plan_draft(o, context, o.sequences, o.kv_pool, reader_options, sms);
    draft_one = plan_draft(o, context, 1, 0, reader_options, sms);
  }
  if (config.has_experts()) {
    const ModelFootprint model = device_footprint(config, weights, reads);
    fmt::print("model    {}\n         {} layers, {}\n", path, config.n_layers, describe_layers(config));
    fmt::print("context  {} tokens{}, batches up to {}\n", context,
               o.sequences > 1 ? fmt::format(" for each of {} sequences", o.sequences) : std::string(), o.batch);
    ExpertReportInput e;
    e.config = &config;
    e.weights = &weights;
    e.model = &model;
    e.buffers = plan_buffers(config, weights, context, o, o.sequences, o.kv_pool, sms);
    e.batch = o.batch;
    e.vram_budget = vram_budget;
    e.vram_source = vram_source;
    e.ram_budget = ram_budget;
    e.ram_source = ram_source;
    e.h2d_gbps = h2d_rate(o, gpu.has_value(), &e.h2d_source);
    e.gpu_gbps = gpu_layer_rate(o, gpu, &e.gpu_source);
    e.cpu_gbps = [&](std::string& source) {
      if (o.cpu_gbps > 0) {
        source = "given";
        return o.cpu_gbps;
      }
      const CpuRateProbe m = measure_cpu_rate(*file, 1, kCpuProbeSeconds, o.threads);
      source = fmt::format("measured: cpu::matmul, {} threads", m.threads);
      return m.gbps;
    };
    if (!o.expert_counts.empty()) {
      const ExpertCounts counts = read_expert_counts_for(o.expert_counts, model_identity(*file, config.n_layers),
                                                         config.layers[0].moe.n_experts);
      e.counts = counts.flat();
      e.counts_source = fmt::format("{}, {} tokens of {}", o.expert_counts, counts.tokens, counts.text);
    }
    print_expert_plan(e);
    return;
  }
  const DevicePlacement placed =
      plan_device_placement(config, weights, reads, plan_buffers(config, weights, context, o, o.sequences, o.kv_pool, sms), o.ring,
                            vram_budget, ram_budget, draft ? &*draft : nullptr);
  const ModelFootprint& model = placed.footprint;
  const PlanRequest& request = placed.request;
  const PlacementPlan& p = placed.plan;
  check_cpu_layers(cpu_layers, p);
  // What holding many sequences costs: the plan for one beside it.
  const DevicePlacement one_placed =
      plan_device_placement(config, weights, reads, plan_buffers(config, weights, context, o, 1, 0, sms), o.ring, vram_budget,
                            ram_budget, draft_one ? &*draft_one : nullptr);
  const PlanRequest& one_request = one_placed.request;
  const PlacementPlan& one = one_placed.plan;

  uint64_t all_layers = 0;
  for (const auto& l : model.layers) all_layers += l.resident_bytes;
  fmt::print("model    {}\n", path);
  fmt::print("         {} layers, {} in layers; head {}, token embedding {}{}\n", config.n_layers, format_size(all_layers),
             format_size(model.output_head_bytes), format_size(model.token_embd_bytes),
             model.tied_embeddings ? " (tied: the head)" : "");
  fmt::print("context  {} tokens{}, batches up to {}\n", context,
             o.sequences > 1 ? fmt::format(" for each of {} sequences", o.sequences) : std::string(), o.batch);
  fmt::print("budgets  VRAM {} ({})\n         RAM  {} ({})\n", format_size(vram_budget), vram_source, format_size(ram_budget),
             ram_source);
  fmt::print("GPU      {} SMs ({})\n", sms, sms_source);
  fmt::print("I/O      {}: {}\n", io_backend_name(reader.backend()), reader.description());
  if (!opened.notes.empty()) fmt::print("         ({})\n", opened.notes);

  const VramReserve& r = request.reserve;
  auto row = [](const std::string& label, const std::string& value) { fmt::print("  {:<34} {:>12}\n", label, value); };
  fmt::print("\nVRAM\n");
  row(kv_cache_label("KV cache", "F16, ", o, context), format_size(r.kv_cache));
  print_window_note(config, context, o);
  row(fmt::format("activations (batch {})", o.batch), format_size(r.activations));
  row(fmt::format("logits (batch {})", o.batch), format_size(r.logits));
  row("prefill GEMM scratch", format_size(r.gemm_scratch));
  row("upload and landing buffers", format_size(r.staging));
  row("output head and norms", format_size(model.output_head_bytes + model.small_bytes));
  row("token embedding", model.tied_embeddings  ? std::string("(the head)")
                         : p.token_embd_in_vram ? format_size(model.token_embd_bytes)
                                                : std::string("0 B (host: one row per token)"));
  row(fmt::format("streaming ring ({} x {})", o.ring, format_size(p.vram_slot_bytes)), format_size(p.vram_ring));
  row("resident layers", format_size(p.vram_layers));
  const DraftVram& d = placed.draft;
  if (draft) {
    row("draft model weights", format_size(d.weights));
    row(kv_cache_label("draft model KV cache", "", o, context), format_size(d.kv_cache));
    row("draft model buffers", format_size(d.buffers));
  }
  row("total", format_size(p.vram_total() + d.total()) + " of " + format_size(vram_budget));
  fmt::print("RAM (pinned)\n");
  row("layers", format_size(p.ram_layers));
  row(fmt::format("storage staging ({} x {})", o.ring, format_size(p.ram_slot_bytes)), format_size(p.ram_staging));
  row("total", format_size(p.ram_total()) + " of " + format_size(ram_budget));

  fmt::print("\ntiers\n");
  for (Tier t : {Tier::Vram, Tier::Ram, Tier::Disk}) {
    fmt::print("  {:<5} layers {:<8} {:>3} layers {:>12}\n", tier_name(t), layer_span(p, t), p.count(t),
               format_size(p.resident_bytes(model, t)));
  }
  if (draft) {
    const DevicePlacement alone = plan_device_placement(
        config, weights, reads, plan_buffers(config, weights, context, o, o.sequences, o.kv_pool, sms), o.ring, vram_budget, ram_budget);
    fmt::print("  the draft model {} ({} of VRAM, resident) pushes {} layers out of VRAM ({} resident without it)\n", d.path,
               format_size(d.total()), alone.plan.count(Tier::Vram) - p.count(Tier::Vram), alone.plan.count(Tier::Vram));
  }
  if (o.sequences > 1) {
    fmt::print("  {} sequences' KV caches ({} more than one's) push {} layers out of VRAM ({} resident with one sequence)\n",
               o.sequences, format_size(r.kv_cache - one_request.reserve.kv_cache),
               one.count(Tier::Vram) - p.count(Tier::Vram), one.count(Tier::Vram));
  }

  // Link speeds: given, measured, or (H2D without a GPU) assumed and said so.
  LinkSpeeds speeds{o.h2d_gbps, o.disk_gbps};
  std::string h2d_source, disk_source;
  speeds.h2d_gbps = h2d_rate(o, gpu.has_value(), &h2d_source);
  speeds.disk_gbps = disk_gbps(o, path, reader_options, io, &disk_source);
  const StepTime t = predict_step_time(p, speeds);
  fmt::print("\nper token (one decode step; a batch of B tokens moves the same bytes once)\n");
  fmt::print("  streamed from RAM   {:>12}\n", format_size(p.streamed_from_ram));
  fmt::print("  streamed from disk  {:>12}\n", format_size(p.streamed_from_disk));
  fmt::print("  H2D link            {:>9.2f} GB/s ({})\n", speeds.h2d_gbps, h2d_source);
  fmt::print("  disk read           {:>9.2f} GB/s ({})\n", speeds.disk_gbps, disk_source);
  if (t.seconds() > 0) {
    fmt::print("  predicted           {:>9.3f} s/token = {:.2f} tok/s (H2D {:.3f} s, disk {:.3f} s, overlapped; "
               "transfer bound, compute of resident layers not included)\n",
               t.seconds(), 1.0 / t.seconds(), t.h2d_seconds, t.disk_seconds);
  } else {
    fmt::print("  predicted           nothing streamed: every layer is resident, speed is compute bound\n");
  }

  HybridReportInput hybrid;
  hybrid.model = &model;
  hybrid.base = &p;
  hybrid.cpu_layers = cpu_layers;
  hybrid.batch_tokens = o.batch_tokens;
  hybrid.rates.link = speeds;
  hybrid.rates.hidden_bytes_per_token = uint64_t(config.dim) * 4;
  hybrid.rates.ring_slots = hybrid_ring_slots();  // as the runner streams beside CPU layers
  if (p.count(Tier::Ram) > 0) {
    fmt::print("\nfour tiers: the CPU computes some RAM layers in place while the link streams the others\n");
    // Measured CPU and link: timed together, as the runner's planner does.
    const bool wide = o.batch_tokens > 1 && o.batch_tokens < kHybridMaxTokens;  // cpu_rate's rule for the 64-token point
    const bool together = gpu && o.h2d_gbps <= 0 &&
                          (o.cpu_gbps <= 0 || (o.batch_tokens > 1 && o.cpu_batch_gbps <= 0) || (wide && o.cpu_wide_gbps <= 0));
    double link_beside = 0;
    hybrid.rates.cpu = cpu_rate(o, *file, together ? &link_beside : nullptr);
    if (together) {
      hybrid.rates.link.h2d_gbps = link_beside;
      fmt::print("  H2D beside the CPU  {:>9.2f} GB/s (measured while the CPU probes ran; {:.2f} alone)\n", link_beside,
                 speeds.h2d_gbps);
    }
    if (o.cpu_gbps <= 0) {  // measured: set beside the host's read ceiling
      const CpuRateProbe read = measure_host_read(kHostReadProbeBytes, kCpuProbeSeconds, o.threads);
      fmt::print("  host memory read    {:>9.2f} GB/s (measured: {} threads summing {}); the CPU layers at 1 token reach {:.0f}% of it\n",
                 read.gbps, read.threads, format_size(read.working_set), 100.0 * hybrid.rates.cpu.decode_gbps / read.gbps);
    }
    std::string gpu_source;
    hybrid.rates.gpu_gbps = gpu_layer_rate(o, gpu, &gpu_source);
    fmt::print("  GPU per layer       {:>9.0f} GB/s ({})\n", hybrid.rates.gpu_gbps, gpu_source);
    fmt::print("  hand-off            {:.0f} us + the hidden state over the link, each way (ASSUMED)\n",
               hybrid.rates.handoff_latency_s * 1e6);
  }
  print_hybrid_plan(hybrid);
  if (o.project) print_hybrid_projection(model, request, hybrid.rates.hidden_bytes_per_token);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Show where each layer would live (VRAM, pinned RAM, storage) and the predicted speed");
  static PlanOptions o;
  cmd->add_option("-m,--model", o.model, "GGUF model (default: SmolLM2-135M-Instruct from the models cache)");
  cmd->add_option("--vram-budget", o.vram_budget, "VRAM to use, e.g. 24GiB; with --gpus one for each, e.g. 24GiB,20GiB, or one for all (default: free VRAM; without a GPU an assumed 24GiB)");
  cmd->add_option("--ram-budget", o.ram_budget, "Host RAM to pin, e.g. 48GiB (default: from MemAvailable)");
  cmd->add_option("-c,--ctx-size", o.context, "Context length in tokens (0: the model's, at most 4096)")->check(non_negative());
  cmd->add_option("--sequences,--parallel", o.sequences, "Sequences whose KV caches are held at once (batch --parallel)")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--kv-pool", o.kv_pool, "KV cache positions shared by the sequences (default: each one's whole context)")
      ->check(non_negative());
  cmd->add_flag("--swa-full", o.swa_full, "Sliding-window layers keep every position, as run --swa-full does");
  cmd->add_option("--batch", o.batch, "Largest prefill batch in tokens (the CUDA runner's prefill chunk)")->capture_default_str()->check(positive());
  cmd->add_option("--ring", o.ring, "GPU layer buffers (and host staging buffers) for streaming")->capture_default_str()->check(positive());
  cmd->add_option("--gpu-sms", o.gpu_sms, "GPU multiprocessors the memory plan assumes (default: the GPU's; without one the H200's 132)")
      ->check(positive());
  cmd->add_option("--io", o.io, "Storage reader: auto, uring, cufile or mmap")->capture_default_str()->check(CLI::IsMember({"auto", "uring", "cufile", "mmap"}));
  cmd->add_option("--h2d-gbps", o.h2d_gbps, "Host-to-device GB/s (default: measured; without a GPU an assumed 25)")->check(positive());
  cmd->add_option("--disk-gbps", o.disk_gbps, "Storage read GB/s (default: measured on the model file)")->check(positive());
  cmd->add_option("--bench-mib", o.bench_mib, "MiB of the model file read to measure storage speed")->capture_default_str()->check(positive());
  cmd->add_option("--cpu-layers", o.cpu_layers, "Layers the CPU computes from host RAM: a count, 0, or auto (the planner's choice when it predicts a gain)")
      ->capture_default_str();
  cmd->add_option("--batch-tokens", o.batch_tokens, "Tokens per pass of the second hybrid plan (a decode batch or prefill chunk)")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--cpu-gbps", o.cpu_gbps, "CPU GB/s of weights at one token per pass (default: measured)")->check(positive());
  cmd->add_option("--cpu-batch-gbps", o.cpu_batch_gbps, "CPU GB/s of weights at --batch-tokens per pass (default: measured)")->check(positive());
  cmd->add_option("--cpu-wide-gbps", o.cpu_wide_gbps, "CPU GB/s of weights at 64 tokens per pass, the widest a hybrid split weighs (default: measured)")->check(positive());
  cmd->add_option("--gpu-gbps", o.gpu_gbps, "GPU GB/s of weights per layer computed (default: measured on the GPU, else an assumed 3330, the H200's)")->check(positive());
  cmd->add_option("-t,--threads", o.threads, "CPU threads for the CPU rate measurement (0: one a core)")->capture_default_str()->check(non_negative());
  cmd->add_option("--gpus", o.gpus, "Plan over several GPUs, e.g. 0,1 (without a GPU, give --vram-budget for each or one for all)");
  cmd->add_option("--split", o.split, "With --gpus: layer (a range of layers per GPU), tensor (every layer's matrices cut across the GPUs) or auto (the faster predicted)")
      ->check(CLI::IsMember({"layer", "tensor", "auto"}));
  cmd->add_option("--peer-gbps", o.peer_gbps, "With --gpus: GPU-to-GPU GB/s (default: measured between the GPUs; without them assumed, half the H2D rate)")->check(positive());
  cmd->add_option("--draft-model", o.draft_model,
                  "A speculative draft model resident beside the model (as run --draft-model loads it): its weights, KV "
                  "cache and buffers come out of the VRAM budget first");
  cmd->add_option("--expert-counts", o.expert_counts,
                  "A mixture of experts: calibrate-experts' counts, which place the most chosen experts in VRAM and "
                  "predict its hits (default: uniform routing)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--project", o.project, "Also project decode on consumer machines (RTX 4090, RTX 3090) from published rates");
  cmd->callback([] { plan(o); });
}

}  // namespace nt::cli
