// A model's weights on one GPU: where each layer lives (VRAM, streamed from
// pinned RAM or storage, or computed on the CPU), the resident weights
// uploaded, and the streamer that brings the others into the ring's GPU slots
// during a pass. The runner asks it where a pass finds each matrix; the KV
// cache, the activations and the compute stay the runner's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/kv_rows.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "backend/cuda/weights/device_matrix.h"
#include "backend/cuda/weights/expert_store.h"
#include "backend/cuda/weights/host_layers.h"
#include "backend/cuda/weights/layer_stream.h"
#include "gguf/gguf_file.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "planning/device_memory_plan.h"
#include "storage/layer_reads.h"

namespace nt {

// A group of matrices sharing one input whose outputs are consecutive column
// ranges of one row-major output (Q, K and V; or a single matrix).
struct MatrixPart {
  DeviceMatrix m;
  int64_t out_offset = 0;
};

// A layer's weights where a pass finds them. The vectors (norm weights,
// biases, the layer's RoPE frequencies) stay resident whatever the layer's
// tier; those its spec lacks are null.
struct LayerOnDevice {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* q_bias = nullptr;  // qkv_bias
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;  // qk_norm
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
  const float* sinks = nullptr;   // attention sinks: n_heads logits
  const float* o_bias = nullptr;  // attention output bias
  // A mixture of experts' biases (MoeSpec::biases): the router's, and one
  // row per expert for each of the experts' matrices.
  const float* router_bias = nullptr;
  const float* gate_exps_bias = nullptr;
  const float* up_exps_bias = nullptr;
  const float* down_exps_bias = nullptr;
  const float* inv_freq = nullptr;  // rope_dim / 2 frequencies of the layer's RoPE table
  std::vector<MatrixPart> qkv;  // one fused matrix when Q, K and V share a format
  DeviceMatrix wo, gate, up, down;
  DeviceMatrix router;  // a mixture of experts' (its experts are the ExpertStore's)

  // Where a vector role's weights go (attn_norm for AttnNorm, ...).
  const float** vector(LayerRole role);

  // A streamed layer's matrices (placed in GPU slot 0) `bytes` further on, in another slot.
  LayerOnDevice in_slot(uint64_t bytes) const;
};

// The layers a runner holds: all of them, or a pipeline stage's range.
struct LayerRange {
  int64_t first = 0, end = 0;
  int64_t count() const { return end - first; }
};

class DeviceWeights {
 public:
  // Places the range's layers (the planner within options' budgets, or the
  // tiers a pipeline stage was given), checks that the weights, the layer
  // ring and the runner's `buffers` fit the GPU's free memory beside a draft
  // model, uploads the resident weights and opens the streamer for the rest.
  // Errors name the file, the GPU and the sizes.
  DeviceWeights(const GgufFile& file, const ModelSpec& config, const ModelWeights& weights, int64_t context,
                const RunnerBuffers& buffers, LayerRange range, const CudaDeviceInfo& device,
                const CudaRunnerOptions& options);
  ~DeviceWeights();  // says what the streamer moved

  Tier tier(int64_t layer) const { return tiers_[size_t(layer - range_.first)]; }
  std::span<const Tier> tiers() const { return tiers_; }
  // A layer's matrices; a streamed one's as placed in GPU slot 0.
  const LayerOnDevice& layer(int64_t l) const { return layers_[size_t(l)]; }
  const DeviceMatrix& token_embd() const { return token_embd_; }
  const DeviceMatrix& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  // Null when every layer is resident.
  LayerStreamer* streamer() const { return streamer_.get(); }
  // A mixture of experts' experts; null for a dense model.
  ExpertStore* experts() const { return experts_.get(); }
  uint64_t slot_bytes() const { return slot_bytes_; }  // from one GPU slot of the ring to the next
  uint64_t bytes_per_token() const { return bytes_per_token_; }
  // Device memory held: the resident weights, the ring and its landing buffers.
  uint64_t device_bytes() const { return device_bytes_; }

  // The hybrid split's CPU layers, computing on the streamer's pinned copies
  // with their caches laid out as the runner's (`pages` pages, `kv`); null
  // when the placement gives the CPU none.
  std::unique_ptr<HostLayers> make_host_layers(const ModelWeights& weights, int64_t pages, const KvRowsParams& kv,
                                               int64_t max_rows, int threads) const;

 private:
  ModelSpec config_;
  LayerRange range_;
  std::vector<Tier> tiers_;
  std::vector<bool> on_cpu_;  // [layer - range.first]: the hybrid split computes it on the host
  std::vector<LayerRead> reads_;
  std::vector<RopeSpec> rope_tables_;                // the distinct RoPE tables of the range's layers
  std::vector<std::vector<float>> inv_freq_host_;  // their frequencies, until uploaded
  DeviceBuffer weights_;
  DeviceBuffer ring_;  // GPU slots of streamed layers
  std::vector<LayerOnDevice> layers_;  // by layer; those outside the range stay empty
  DeviceMatrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  uint64_t slot_bytes_ = 0;
  uint64_t bytes_per_token_ = 0;
  uint64_t device_bytes_ = 0;
  std::unique_ptr<LayerStreamer> streamer_;  // declared after ring_, which it fills
  std::unique_ptr<ExpertStore> experts_;
};

}  // namespace nt
