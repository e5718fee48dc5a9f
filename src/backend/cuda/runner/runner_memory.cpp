#include "backend/cuda/runner/runner_memory.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/weights/layer_stream.h"
#include "planning/placement.h"
#include "runtime/kernel_shapes.h"
#include "storage/host_memory.h"

namespace nt {

static_assert(kLandingBuffers == kStreamLandingBuffers, "the memory plan counts the streamer's landing buffers");

DraftVram draft_model_vram(int64_t context, int multiprocessors, const CudaRunnerOptions& o) {
  const auto file = GgufFile::open(o.draft_model);
  const ModelSpec config = read_model_spec(file->header(), o.draft_model);
  const ModelWeights weights = load_model_weights(*file, config);
  const OpenedReader opened = open_layer_reader(o.draft_model, o);
  const auto reads = plan_layer_reads(file->header(), opened.reader->alignment(), o.draft_model);
  return draft_vram(o.draft_model, config, weights, reads, context, o.max_sequences, multiprocessors, o.kv_pool);
}

CudaPlacement place_layers(const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads,
                           const RunnerBuffers& buffers, int64_t context, int multiprocessors, const CudaRunnerOptions& o) {
  uint64_t vram_budget = 0;
  if (o.vram_budget) {
    vram_budget = *o.vram_budget;
  } else {
    size_t free_bytes = 0, total_bytes = 0;
    NT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    vram_budget = free_bytes > kMemoryMarginBytes ? free_bytes - kMemoryMarginBytes : 0;
  }
  const uint64_t ram_budget = o.ram_budget ? *o.ram_budget : automatic_ram_budget(host_mem_available(), c, o.max_batch).budget;
  if (o.draft_model.empty()) return plan_device_placement(c, w, reads, buffers, o.ring_slots, vram_budget, ram_budget);
  const DraftVram draft = draft_model_vram(context, multiprocessors, o);
  return plan_device_placement(c, w, reads, buffers, o.ring_slots, vram_budget, ram_budget, &draft);
}

OpenedReader open_layer_reader(const std::string& path, const CudaRunnerOptions& o) {
  ReaderOptions ro;
  ro.backend = o.io;
  return open_file_reader(path, ro);
}

CudaPlacement plan_cuda_placement(const GgufFile& file, int64_t context, const CudaRunnerOptions& options) {
  const ModelSpec config = read_model_spec(file.header(), file.path());
  const ModelWeights weights = load_model_weights(file, config);
  const CudaDeviceInfo device = require_cuda_device(options.device);
  NT_CUDA_CHECK(cudaSetDevice(device.index));
  const OpenedReader opened = open_layer_reader(file.path(), options);
  const auto reads = plan_layer_reads(file.header(), opened.reader->alignment(), file.path());
  return place_layers(config, weights, reads,
                      runner_buffers(config, weights, context, kv_cache_context(context), options.max_batch, options.max_sequences,
                                     device.multiprocessors, options.kv_pool, keeps_kv_windows(options)),
                      context, device.multiprocessors, options);
}

}  // namespace nt
