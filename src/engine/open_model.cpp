#include "engine/open_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cpu/cpu_runner.h"
#include "core/error.h"
#include "engine/default_model.h"
#include "engine/expert_calibration.h"
#include "engine/hybrid_split.h"
#include "model/arch/model_spec.h"
#ifdef NT_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "engine/open_pipeline.h"
#endif

namespace nt {

Device parse_device(const std::string& name, const std::string& flag) {
  if (name == "auto") return Device::Auto;
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  fail("{} {}: expected auto, cpu or cuda", flag, name);
}

int64_t default_context(const GgufFile& file) {
  return std::min<int64_t>(file.header().get_int(architecture_prefix(file.header()) + "context_length", 4096), 4096);
}

OpenedModel open_model(const OpenModelOptions& o) {
  if (o.sequences < 1) fail("{} parallel sequences: at least 1", o.sequences);
  OpenedModel m;
  m.path = o.path.empty() ? default_model_path() : o.path;
  m.file = o.file ? o.file : GgufFile::open(m.path);
  // The architecture first: an unsupported one is named before anything else is read.
  const ModelSpec spec = read_model_spec(m.file->header(), m.path);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(m.file->header(), m.path));
  const int64_t context = o.context > 0 ? o.context : default_context(*m.file);
  KvPages::check_pool(o.kv_pool, context);
  Device device = o.device;
  const bool several_gpus = o.gpus.size() > 1;
  if (!o.nccl_id_file.empty() && (!several_gpus || o.split != Split::Tensor)) {
    fail("--nccl-id {}: a process per GPU runs the tensor split over several GPUs (--gpus 0,1 --split tensor)", o.nccl_id_file);
  }
  if (several_gpus && o.cpu_layers.value_or(0) > 0) {
    fail("--cpu-layers {}: the CPU computes no layers of a run over several GPUs (--gpus)", *o.cpu_layers);
  }
  // Checked on every device, used where experts are cached (CUDA).
  std::vector<uint64_t> expert_counts;
  if (!o.expert_counts.empty()) {
    if (!spec.has_experts()) fail("--expert-counts {}: '{}' has no mixture of experts", o.expert_counts, m.path);
    expert_counts =
        read_expert_counts_for(o.expert_counts, model_identity(*m.file, spec.n_layers), spec.layers[0].moe.n_experts).flat();
  }
#ifdef NT_HAVE_CUDA
  if (device == Device::Auto) {  // GPUs named are used, or named in the error that they are absent
    std::string why;
    device = !o.gpus.empty() || probe_cuda_device(0, &why) ? Device::Cuda : Device::Cpu;
  }
  if (device == Device::Cpu && !o.gpus.empty()) fail("--gpus: the GPUs run only on the CUDA backend (--device cuda)");
  if (device == Device::Cuda) {
    m.gpus = o.gpus.empty() ? std::vector<int>{0} : o.gpus;
    CudaRunnerOptions cuda;
    cuda.device = o.gpus.empty() ? 0 : o.gpus[0];
    cuda.max_sequences = o.sequences;
    cuda.kv_pool = o.kv_pool;
    cuda.vram_budget = o.vram_budget;
    cuda.ram_budget = o.ram_budget;
    cuda.io = o.io;
    cuda.trace_path = o.trace_path;
    cuda.draft_model = o.draft_model;
    cuda.expert_counts = expert_counts;
    cuda.expert_misses = o.expert_misses;
    cuda.on_load_progress = o.on_load_progress;
    cuda.cpu_threads = o.threads;
    // CPU layers keep whole contexts (keeps_kv_windows): where the sliding-window
    // layers would keep their window, no CPU layers unless asked for, and then whole contexts.
    cuda.swa_full = o.swa_full || (spec.has_sliding_layers() && o.cpu_layers.value_or(0) > 0);
    const bool windows = spec.has_sliding_layers() && !cuda.swa_full;
    if (several_gpus && spec.has_experts()) {
      fail("{}: --gpus: the layer and tensor splits run dense models only so far; run this mixture of experts on one GPU",
           m.path);
    }
    if (several_gpus) {
      // One budget given for all, or one per GPU.
      std::vector<uint64_t> budgets = o.vram_budgets;
      if (budgets.empty() && o.vram_budget) budgets.assign(o.gpus.size(), *o.vram_budget);
      CudaPipelineOptions stages;
      stages.gpus = o.gpus;
      stages.vram_budgets = budgets;
      stages.runner = cuda;
      stages.nccl_id_file = o.nccl_id_file;
      stages.join_timeout_s = o.join_timeout_s;
      OpenedPipeline pipeline = open_cuda_pipeline(*m.file, context, stages, o.split);
      m.runner = std::move(pipeline.runner);
      m.split_summary = std::move(pipeline.summary);
      return m;
    }
    std::optional<CudaPlacement> placement;
    try {
      // A mixture of experts keeps its layers on the GPU, and a model keeping
      // its windows its caches there: no hybrid split of whole layers.
      if (!spec.has_experts() && !windows) placement = plan_cuda_placement(*m.file, context, cuda);
    } catch (const Error&) {
      // Nothing fits: the runner says why, with the free memory beside it.
    }
    if (spec.has_experts() && o.cpu_layers.value_or(0) > 0) cuda.cpu_layers = *o.cpu_layers;  // which the runner refuses by name
    if (placement) {
      const HybridSplit split = choose_hybrid_split(*m.file, placement->footprint, placement->plan, o.cpu_layers, o.threads);
      cuda.cpu_layers = split.cpu_layers;
      cuda.cpu_passes = split.passes;
      // While the CPU computes a layer, the link keeps copying only into free
      // GPU slots: with two, both hold the next streamed layers by then and the
      // link idles (70B at 24 GiB: 305 ms a token with 2 slots, the link busy 216).
      if (split.cpu_layers > 0) cuda.ring_slots = std::max(cuda.ring_slots, hybrid_ring_slots());
      m.hybrid_summary = split.summary;
    }
    m.runner = make_cuda_runner(*m.file, context, cuda);
  }
#else
  if (device == Device::Cuda) fail("--device cuda: this build has no CUDA backend (configure with -DNT_CUDA=ON)");
  if (!o.gpus.empty()) fail("--gpus: this build has no CUDA backend (configure with -DNT_CUDA=ON)");
#endif
  if (!m.runner) {
    if (o.cpu_layers.value_or(0) > 0) fail("--cpu-layers {}: a hybrid split needs the CUDA backend", *o.cpu_layers);
    CpuRunnerOptions cpu;
    cpu.context = context;
    cpu.sequences = o.sequences;
    cpu.kv_pool = o.kv_pool;
    cpu.threads = o.threads;
    cpu.kv_f32 = o.kv_f32;
    cpu.swa_full = o.swa_full;
    m.runner = make_cpu_runner(m.file, cpu);
  }
  return m;
}

}  // namespace nt
