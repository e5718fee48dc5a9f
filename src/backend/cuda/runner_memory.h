// The CUDA runner's device memory, planned on the host: the activation
// arena's layout, the layers' device-layout sizes, the buffers beside the
// weights (KV slots, GEMM scratch, activations) and the placement of layers
// in VRAM, pinned RAM and storage. The runner allocates from these numbers
// and plan_cuda_placement reports them, so the two cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_matrix.h"
#include "model/llama_config.h"
#include "model/llama_weights.h"
#include "storage/io_reader.h"
#include "storage/layer_reads.h"

namespace nt {

inline constexpr uint64_t kUploadStagingBytes = 64ull << 20;  // the weight upload's landing buffer (and each pinned slot)
inline constexpr uint64_t kGemmScratchMaxBytes = 256ull << 20;
inline constexpr uint64_t kMemoryMarginBytes = 512ull << 20;  // CUDA context, cuBLAS workspace, fragmentation

// Offsets of sub-allocations inside one device block, each 256-byte aligned.
class ArenaPlan {
 public:
  uint64_t reserve(uint64_t bytes) {
    const uint64_t at = size_;
    size_ += align_device(bytes);
    return at;
  }
  uint64_t size() const { return size_; }

 private:
  uint64_t size_ = 0;
};

// A step's inputs, on the device and in the pinned staging alike, so one copy
// moves them: the position, the top_logits k, then the tokens.
inline constexpr int64_t kInputsHeader = 2;

// Offsets of the activation buffers for chunks of up to `batch` tokens.
struct ActivationLayout {
  uint64_t inputs, x, xn, qkv, att, gate, up, h, logits, partials, q8, q8_scales, f16, argmax, argmax_scratch, head_rows,
      top, top_scratch;
  uint64_t norm_q8, norm_q8_scales, norm_sumsq;
  uint64_t partial_floats;
  uint64_t total;
};

ActivationLayout layout_activations(const LlamaConfig& c, int64_t batch, int64_t context, int multiprocessors);

// The matrices of a layer as uploaded: groups of row-stacked parts (Q, K and V
// fused when they share a format).
std::vector<std::vector<const WeightRef*>> layer_matrix_groups(const LlamaLayerWeights& lw);

uint64_t group_device_bytes(const std::vector<const WeightRef*>& parts);  // throws for unsupported formats

// K and V of one position over all layers, in f16.
uint64_t cache_bytes_per_position(const LlamaConfig& c);

// Device memory besides the weights, shared by the planner and the allocation.
struct RunnerBuffers {
  uint64_t kv = 0, gemm = 0, activations = 0;
};

RunnerBuffers runner_buffers(const LlamaConfig& c, const LlamaWeights& w, int64_t context, int64_t cache_context,
                             const CudaRunnerOptions& o, int multiprocessors);

// The placement of layers in VRAM, pinned RAM and storage, in device-layout
// bytes. Norm vectors, the token embedding and the head always stay resident.
CudaPlacement place_layers(const LlamaConfig& c, const LlamaWeights& w, const std::vector<LayerRead>& reads,
                           const RunnerBuffers& buffers, const CudaRunnerOptions& o);

// The storage reader of streamed layers (--io as given).
OpenedReader open_layer_reader(const std::string& path, const CudaRunnerOptions& o);

}  // namespace nt
