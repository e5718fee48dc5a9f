// CudaLlamaRunner: a Llama forward pass with every weight resident on one GPU.
// Decode steps replay a captured CUDA graph; the position and token live in
// device memory, so the graph never needs updating. Prefill runs in chunks of
// up to max_batch tokens: short chunks through the multi-column mat-vec, long
// ones through dequantize + cuBLAS GEMM.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/dequantize.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_matrix.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/llama_ops.h"
#include "backend/cuda/matvec.h"
#include "model/llama_weights.h"
#include "model/rope.h"

namespace nt {
namespace {

constexpr uint64_t kUploadStagingBytes = 64ull << 20;
constexpr uint64_t kGemmScratchMaxBytes = 256ull << 20;
constexpr uint64_t kMemoryMarginBytes = 512ull << 20;  // CUDA context, cuBLAS workspace, fragmentation

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

// One input of the matrix products, in each form a consumer may need.
struct Input {
  const float* f32;
  const int8_t* q8;
  const float2* q8_scales;
  const uint16_t* f16;
  int64_t cols;
};

// A group of matrices sharing one input whose outputs are consecutive column
// ranges of one row-major output (Q, K and V; or a single matrix).
struct MatrixPart {
  DeviceMatrix m;
  int64_t out_offset = 0;
};

// Offsets of the activation buffers for chunks of up to `batch` tokens.
struct ActivationLayout {
  uint64_t tokens, pos, x, xn, qkv, att, gate, up, h, logits, partials, q8, q8_scales, f16;
  uint64_t partial_floats;
  uint64_t total;
};

ActivationLayout layout_activations(const LlamaConfig& c, int64_t batch, int64_t context, int multiprocessors) {
  const uint64_t b = uint64_t(batch);
  const uint64_t max_input = uint64_t(std::max({c.dim, c.q_dim(), c.ffn_dim}));
  ActivationLayout a{};
  for (int64_t n = 1; n <= batch; ++n) {  // the partials of the widest key split any chunk length uses
    const int splits = attention_splits(n, int(c.n_heads), int(c.n_kv_heads), int(c.head_dim), context, multiprocessors);
    a.partial_floats = std::max<uint64_t>(a.partial_floats, attention_partials_floats(n, int(c.n_heads), int(c.head_dim), splits));
  }
  ArenaPlan plan;
  a.tokens = plan.reserve(4 * b);
  a.pos = plan.reserve(4);
  a.x = plan.reserve(4 * b * uint64_t(c.dim));
  a.xn = plan.reserve(4 * b * max_input);
  a.qkv = plan.reserve(4 * b * uint64_t(c.q_dim() + 2 * c.kv_dim()));
  a.att = plan.reserve(4 * b * uint64_t(c.q_dim()));
  a.gate = plan.reserve(4 * b * uint64_t(c.ffn_dim));
  a.up = plan.reserve(4 * b * uint64_t(c.ffn_dim));
  a.h = plan.reserve(4 * b * uint64_t(c.ffn_dim));
  a.logits = plan.reserve(4 * b * uint64_t(c.vocab_size));
  a.partials = plan.reserve(4 * a.partial_floats);
  a.q8 = plan.reserve(b * max_input);
  a.q8_scales = plan.reserve(8 * b * max_input / 32);
  a.f16 = plan.reserve(2 * b * max_input);
  a.total = plan.size();
  return a;
}

struct LayerOnDevice {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  std::vector<MatrixPart> qkv;  // one fused matrix when Q, K and V share a format
  DeviceMatrix wo, gate, up, down;
};

class CudaLlamaRunner final : public ModelRunner {
 public:
  CudaLlamaRunner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options);
  ~CudaLlamaRunner() override;

  const LlamaConfig& config() const override { return config_; }
  int64_t context_size() const override { return context_; }
  std::string description() const override;
  uint64_t weight_bytes_per_token() const override { return weight_bytes_per_token_; }
  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) override;

 private:
  void plan_and_upload(const GgufFile& file, const LlamaWeights& weights);
  void allocate_activations();
  // Runs n tokens at device-side position; logits of the last token (or all) into logits_.
  void run_chunk(int64_t n, int64_t max_keys, bool all_logits);
  void matmul(const DeviceMatrix& m, const Input& in, int64_t n, float* y, int64_t y_stride, bool accumulate);
  Input prepare_input(const float* x, int64_t n, int64_t cols, bool use_gemm);

  LlamaConfig config_;
  int64_t context_;
  int64_t cache_context_;  // context_ rounded up to whole KV tiles
  CudaRunnerOptions options_;
  CudaDeviceInfo device_;
  uint64_t weight_bytes_per_token_ = 0;
  uint64_t resident_bytes_ = 0;
  cudaStream_t stream_ = nullptr;

  DeviceBuffer weights_;
  DeviceMatrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  const float* inv_freq_ = nullptr;
  std::vector<LayerOnDevice> layers_;

  DeviceBuffer k_cache_, v_cache_;
  DeviceBuffer activations_;
  std::optional<Gemm> gemm_;
  int32_t* tokens_dev_ = nullptr;
  int32_t* pos_dev_ = nullptr;
  float *x_ = nullptr, *xn_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *gate_ = nullptr, *up_ = nullptr,
        *h_ = nullptr, *logits_ = nullptr, *partials_ = nullptr;
  int8_t* q8_ = nullptr;
  float2* q8_scales_ = nullptr;
  uint16_t* f16_ = nullptr;
  PinnedBuffer host_io_;  // tokens, position and one row of logits
  cudaGraphExec_t decode_graph_ = nullptr;
};

CudaLlamaRunner::CudaLlamaRunner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options)
    : context_(context),
      cache_context_((context + kKvTile - 1) / kKvTile * kKvTile),
      options_(options),
      device_(require_cuda_device(options.device)) {
  config_ = read_llama_config(file.header(), file.path());
  if (context <= 0) fail("{}: context size must be positive, got {}", file.path(), context);
  if (options_.max_batch < 1) fail("max_batch must be at least 1, got {}", options_.max_batch);
  if (config_.head_dim % 8 != 0) {
    fail("{}: head dimension {} is not a multiple of 8, which the CUDA KV cache layout needs", file.path(), config_.head_dim);
  }
  const LlamaWeights weights = load_llama_weights(file, config_);
  NT_CUDA_CHECK(cudaSetDevice(device_.index));
  NT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  plan_and_upload(file, weights);
  allocate_activations();
}

CudaLlamaRunner::~CudaLlamaRunner() {
  if (decode_graph_) cudaGraphExecDestroy(decode_graph_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaLlamaRunner::description() const {
  return fmt::format("cuda ({}, {} SMs, {:.1f} MiB resident, context {}, {})", device_.name, device_.multiprocessors,
                     double(resident_bytes_) / double(1ull << 20), context_,
                     options_.decode_graph ? "decode graph" : "no graph");
}

void CudaLlamaRunner::plan_and_upload(const GgufFile& file, const LlamaWeights& w) {
  const LlamaConfig& c = config_;
  ArenaPlan plan;
  struct Pending {
    DeviceMatrix* target;
    uint64_t offset;
    std::vector<const WeightRef*> parts;  // stacked row-wise
  };
  std::vector<Pending> matrices;
  struct PendingVector {
    const float** target;
    uint64_t offset;
    const void* data;
    uint64_t bytes;
  };
  std::vector<PendingVector> vectors;
  uint64_t largest_matrix_elems = 0;

  auto add_matrix = [&](DeviceMatrix* target, std::vector<const WeightRef*> parts) {
    int64_t rows = 0;
    for (const WeightRef* p : parts) rows += p->rows;
    const TensorType type = parts[0]->type;
    const uint64_t bytes = device_matrix_bytes(type, rows, parts[0]->cols);  // throws for unsupported formats
    target->type = type;
    target->rows = rows;
    target->cols = parts[0]->cols;
    largest_matrix_elems = std::max(largest_matrix_elems, uint64_t(rows) * uint64_t(parts[0]->cols));
    matrices.push_back({target, plan.reserve(bytes), std::move(parts)});
  };
  auto add_vector = [&](const float** target, const void* data, uint64_t bytes) {
    vectors.push_back({target, plan.reserve(bytes), data, bytes});
  };

  layers_.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& lw = w.layers[size_t(l)];
    LayerOnDevice& ld = layers_[size_t(l)];
    add_vector(&ld.attn_norm, lw.attn_norm.data, lw.attn_norm.bytes());
    add_vector(&ld.ffn_norm, lw.ffn_norm.data, lw.ffn_norm.bytes());
    if (lw.wq.type == lw.wk.type && lw.wq.type == lw.wv.type) {
      ld.qkv.resize(1);
      add_matrix(&ld.qkv[0].m, {&lw.wq, &lw.wk, &lw.wv});
    } else {
      ld.qkv.resize(3);
      add_matrix(&ld.qkv[0].m, {&lw.wq});
      add_matrix(&ld.qkv[1].m, {&lw.wk});
      add_matrix(&ld.qkv[2].m, {&lw.wv});
      ld.qkv[1].out_offset = c.q_dim();
      ld.qkv[2].out_offset = c.q_dim() + c.kv_dim();
    }
    add_matrix(&ld.wo, {&lw.wo});
    add_matrix(&ld.gate, {&lw.w_gate});
    add_matrix(&ld.up, {&lw.w_up});
    add_matrix(&ld.down, {&lw.w_down});
    weight_bytes_per_token_ += lw.bytes();
  }
  add_matrix(&token_embd_, {&w.token_embd});
  if (!c.tied_embeddings) add_matrix(&output_, {&w.output});
  weight_bytes_per_token_ += w.output.bytes() + w.output_norm.bytes();
  add_vector(&output_norm_, w.output_norm.data, w.output_norm.bytes());
  const std::vector<float> inv_freq =
      rope_inv_freqs(c, c.has_rope_freqs_tensor ? reinterpret_cast<const float*>(w.rope_freqs.data) : nullptr);
  add_vector(&inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float));

  // Everything else the runner allocates, to check the total before uploading.
  const uint64_t kv_bytes = 2 * uint64_t(c.n_layers) * uint64_t(c.kv_dim()) * uint64_t(cache_context_) * 2;
  const uint64_t gemm_bytes = std::min(kGemmScratchMaxBytes, largest_matrix_elems * 2);
  const uint64_t activation_bytes =
      layout_activations(c, options_.max_batch, context_, device_.multiprocessors).total;
  const uint64_t needed = plan.size() + kv_bytes + gemm_bytes + activation_bytes + kUploadStagingBytes;
  size_t free_bytes = 0, total_bytes = 0;
  NT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (needed + kMemoryMarginBytes > free_bytes) {
    fail("{}: does not fit on {}: {:.2f} GiB needed (weights {:.2f}, KV cache {:.2f} for {} tokens, scratch {:.2f}) "
         "plus a {:.2f} GiB margin, but {:.2f} GiB of {:.2f} GiB are free; use a smaller context or a smaller model",
         file.path(), device_.name, double(needed) / (1ull << 30), double(plan.size()) / (1ull << 30),
         double(kv_bytes) / (1ull << 30), context_, double(gemm_bytes + activation_bytes) / (1ull << 30),
         double(kMemoryMarginBytes) / (1ull << 30), double(free_bytes) / (1ull << 30), double(total_bytes) / (1ull << 30));
  }

  weights_ = DeviceBuffer(plan.size(), "the model weights");
  auto* base = weights_.as<uint8_t>();
  for (const PendingVector& v : vectors) {
    NT_CUDA_CHECK(cudaMemcpy(base + v.offset, v.data, v.bytes, cudaMemcpyHostToDevice));
    *v.target = reinterpret_cast<const float*>(base + v.offset);
  }
  DeviceBuffer staging(kUploadStagingBytes, "the weight upload staging buffer");
  for (const Pending& p : matrices) {
    *p.target = place_device_matrix(p.target->type, p.target->rows, p.target->cols, base + p.offset);
    int64_t row = 0;
    for (const WeightRef* part : p.parts) {
      upload_matrix_rows(*p.target, row, part->rows, part->data, staging.get(), staging.size());
      row += part->rows;
    }
  }
  if (c.tied_embeddings) output_ = token_embd_;
  k_cache_ = DeviceBuffer(kv_bytes / 2, "the K cache");
  v_cache_ = DeviceBuffer(kv_bytes / 2, "the V cache");
  NT_CUDA_CHECK(cudaMemset(k_cache_.get(), 0, k_cache_.size()));
  NT_CUDA_CHECK(cudaMemset(v_cache_.get(), 0, v_cache_.size()));
  gemm_.emplace(gemm_bytes);
  resident_bytes_ = plan.size() + kv_bytes;
}

void CudaLlamaRunner::allocate_activations() {
  const ActivationLayout a = layout_activations(config_, options_.max_batch, context_, device_.multiprocessors);
  activations_ = DeviceBuffer(a.total, "activation buffers");
  auto* base = activations_.as<uint8_t>();
  auto at = [&](uint64_t offset) { return static_cast<void*>(base + offset); };
  tokens_dev_ = static_cast<int32_t*>(at(a.tokens));
  pos_dev_ = static_cast<int32_t*>(at(a.pos));
  x_ = static_cast<float*>(at(a.x));
  xn_ = static_cast<float*>(at(a.xn));
  qkv_ = static_cast<float*>(at(a.qkv));
  att_ = static_cast<float*>(at(a.att));
  gate_ = static_cast<float*>(at(a.gate));
  up_ = static_cast<float*>(at(a.up));
  h_ = static_cast<float*>(at(a.h));
  logits_ = static_cast<float*>(at(a.logits));
  partials_ = a.partial_floats ? static_cast<float*>(at(a.partials)) : nullptr;
  q8_ = static_cast<int8_t*>(at(a.q8));
  q8_scales_ = static_cast<float2*>(at(a.q8_scales));
  f16_ = static_cast<uint16_t*>(at(a.f16));
  host_io_ = PinnedBuffer(4 * uint64_t(options_.max_batch + 1) + 4 * uint64_t(config_.vocab_size), "token and logit transfers");
}

Input CudaLlamaRunner::prepare_input(const float* x, int64_t n, int64_t cols, bool use_gemm) {
  if (use_gemm) {
    convert_f32_to_f16(x, n * cols, f16_, stream_);
  } else {
    quantize_activations(x, n, cols, q8_, q8_scales_, stream_);
  }
  return Input{x, q8_, q8_scales_, f16_, cols};
}

void CudaLlamaRunner::matmul(const DeviceMatrix& m, const Input& in, int64_t n, float* y, int64_t y_stride,
                             bool accumulate) {
  if (n >= options_.gemm_min_tokens) {
    gemm_->run(m, in.f16, n, y, y_stride, accumulate, stream_);
    return;
  }
  for (int64_t t = 0; t < n; t += kMatvecMaxColumns) {
    const int columns = int(std::min<int64_t>(kMatvecMaxColumns, n - t));
    MatvecParams p;
    p.w = m;
    p.x = {in.f32 + t * in.cols, in.q8 + t * in.cols, in.q8_scales + t * in.cols / 32};
    p.y = y + t * y_stride;
    p.y_stride = y_stride;
    p.residual = accumulate ? p.y : nullptr;
    matvec(p, columns, stream_);
  }
}

void CudaLlamaRunner::run_chunk(int64_t n, int64_t max_keys, bool all_logits) {
  const LlamaConfig& c = config_;
  const bool use_gemm = n >= options_.gemm_min_tokens;
  const int64_t qkv_width = c.q_dim() + 2 * c.kv_dim();
  const int64_t cache_layer = c.n_kv_heads * cache_context_ * c.head_dim;

  // Token embeddings into the residual stream x.
  gather_rows_f32(token_embd_, tokens_dev_, n, x_, stream_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerOnDevice& L = layers_[l];
    // Attention block: x += Wo * attention(rope(Wqkv * norm(x)))
    rms_norm(x_, L.attn_norm, n, c.dim, c.rms_eps, xn_, use_gemm ? nullptr : q8_, q8_scales_, stream_);
    if (use_gemm) convert_f32_to_f16(xn_, n * c.dim, f16_, stream_);
    const Input normed{xn_, q8_, q8_scales_, f16_, c.dim};
    for (const MatrixPart& part : L.qkv) matmul(part.m, normed, n, qkv_ + part.out_offset, qkv_width, false);

    RopeKvParams rope;
    rope.qkv = qkv_;
    rope.qkv_stride = qkv_width;
    rope.n_tokens = n;
    rope.pos = pos_dev_;
    rope.inv_freq = inv_freq_;
    rope.rope_pairs = int(c.rope_dim / 2);
    rope.n_heads = int(c.n_heads);
    rope.n_kv_heads = int(c.n_kv_heads);
    rope.head_dim = int(c.head_dim);
    rope.k_cache = k_cache_.as<uint16_t>() + int64_t(l) * cache_layer;
    rope.v_cache = v_cache_.as<uint16_t>() + int64_t(l) * cache_layer;
    rope.context = cache_context_;
    rope_and_store_kv(rope, stream_);

    AttentionParams att;
    att.q = qkv_;
    att.q_stride = qkv_width;
    att.k_cache = rope.k_cache;
    att.v_cache = rope.v_cache;
    att.context = cache_context_;
    att.out = att_;
    att.out_stride = c.q_dim();
    att.pos = pos_dev_;
    att.n_tokens = n;
    att.n_heads = int(c.n_heads);
    att.n_kv_heads = int(c.n_kv_heads);
    att.head_dim = int(c.head_dim);
    att.n_splits = attention_splits(n, att.n_heads, att.n_kv_heads, att.head_dim, max_keys, device_.multiprocessors);
    att.partials = partials_;
    attention(att, stream_);
    matmul(L.wo, prepare_input(att_, n, c.q_dim(), use_gemm), n, x_, c.dim, true);

    // Feed-forward block: x += Wdown * (silu(Wgate * norm(x)) * (Wup * norm(x)))
    rms_norm(x_, L.ffn_norm, n, c.dim, c.rms_eps, xn_, use_gemm ? nullptr : q8_, q8_scales_, stream_);
    if (use_gemm) convert_f32_to_f16(xn_, n * c.dim, f16_, stream_);
    if (!use_gemm && n <= kMatvecMaxColumns && L.gate.type == L.up.type) {
      MatvecParams p;
      p.w = L.gate;
      p.w_up = L.up;
      p.x = {xn_, q8_, q8_scales_};
      p.y = h_;
      p.y_stride = c.ffn_dim;
      matvec(p, int(n), stream_);
    } else {
      matmul(L.gate, normed, n, gate_, c.ffn_dim, false);
      matmul(L.up, normed, n, up_, c.ffn_dim, false);
      swiglu(gate_, up_, n * c.ffn_dim, h_, stream_);
    }
    matmul(L.down, prepare_input(h_, n, c.ffn_dim, use_gemm), n, x_, c.dim, true);
  }

  // Final norm and classifier, for every token or only the last.
  const int64_t rows = all_logits ? n : 1;
  const float* x_rows = x_ + (n - rows) * c.dim;
  const bool head_gemm = rows >= options_.gemm_min_tokens;
  rms_norm(x_rows, output_norm_, rows, c.dim, c.rms_eps, xn_, head_gemm ? nullptr : q8_, q8_scales_, stream_);
  if (head_gemm) convert_f32_to_f16(xn_, rows * c.dim, f16_, stream_);
  const Input final_in{xn_, q8_, q8_scales_, f16_, c.dim};
  if (head_gemm) {
    gemm_->run(output_, f16_, rows, logits_, c.vocab_size, false, stream_);
  } else {
    for (int64_t t = 0; t < rows; t += kMatvecMaxColumns) {
      const int columns = int(std::min<int64_t>(kMatvecMaxColumns, rows - t));
      MatvecParams p;
      p.w = output_;
      p.x = {final_in.f32 + t * c.dim, final_in.q8 + t * c.dim, final_in.q8_scales + t * c.dim / 32};
      p.y = logits_ + t * c.vocab_size;
      p.y_stride = c.vocab_size;
      matvec(p, columns, stream_);
    }
  }
}

void CudaLlamaRunner::forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) {
  const int64_t total = int64_t(tokens.size());
  if (pos < 0 || pos + total > context_) {
    fail("context overflow: positions {}..{} do not fit the KV cache of {} tokens", pos, pos + total - 1, context_);
  }
  for (int64_t i = 0; i < total; ++i) {
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= config_.vocab_size) {
      fail("token id {} at index {} is outside the vocabulary of {} tokens", tokens[size_t(i)], i, config_.vocab_size);
    }
  }
  const int64_t vocab = config_.vocab_size;
  int32_t* host_tokens = host_io_.as<int32_t>();
  float* host_logits = reinterpret_cast<float*>(host_tokens + options_.max_batch + 1);
  for (int64_t start = 0; start < total; start += options_.max_batch) {
    const int64_t n = std::min(options_.max_batch, total - start);
    const bool last_chunk = start + n == total;
    // The previous chunk synchronized, so the pinned staging is free to rewrite.
    std::memcpy(host_tokens, tokens.data() + start, size_t(n) * sizeof(int32_t));
    host_tokens[options_.max_batch] = int32_t(pos + start);
    NT_CUDA_CHECK(cudaMemcpyAsync(tokens_dev_, host_tokens, size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
    NT_CUDA_CHECK(cudaMemcpyAsync(pos_dev_, host_tokens + options_.max_batch, 4, cudaMemcpyHostToDevice, stream_));
    if (n == 1 && options_.decode_graph) {
      if (!decode_graph_) {
        cudaGraph_t graph = nullptr;
        NT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        try {
          run_chunk(1, context_, false);
        } catch (...) {
          cudaStreamEndCapture(stream_, &graph);
          if (graph) cudaGraphDestroy(graph);
          throw;
        }
        NT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        const cudaError_t err = cudaGraphInstantiate(&decode_graph_, graph, 0);
        cudaGraphDestroy(graph);
        NT_CUDA_CHECK(err);
      }
      NT_CUDA_CHECK(cudaGraphLaunch(decode_graph_, stream_));
    } else {
      run_chunk(n, pos + start + n, all_logits);
    }
    if (all_logits) {
      NT_CUDA_CHECK(cudaMemcpyAsync(logits + start * vocab, logits_, size_t(n * vocab) * 4, cudaMemcpyDeviceToHost, stream_));
    } else if (last_chunk) {
      NT_CUDA_CHECK(cudaMemcpyAsync(host_logits, logits_, size_t(vocab) * 4, cudaMemcpyDeviceToHost, stream_));
    }
    NT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (!all_logits && last_chunk) std::memcpy(logits, host_logits, size_t(vocab) * 4);
  }
}

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options) {
  return std::make_unique<CudaLlamaRunner>(file, context, options);
}

}  // namespace nt
