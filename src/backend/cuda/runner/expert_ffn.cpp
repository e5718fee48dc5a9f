#include "backend/cuda/runner/expert_ffn.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/family_ops.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/matvec.h"
#include "backend/cuda/kernels/moe_ops.h"
#include "backend/cuda/runner/layer_pass.h"
#include "core/error.h"

namespace nt {

namespace {

enum TraceRow { kCopiesRow = 1, kGpuRow = 2, kCpuRow = 3 };

// What an expert's products apart cost beyond one read of its weights: the
// bytes the GPU reads in the time of their seven or so launches (about 20
// us at 3.3 TB/s; an estimate, not a measurement).
constexpr uint64_t kLaunchBytes = 64ull << 20;

}  // namespace

uint64_t ExpertFfn::scratch_bytes(const ModelSpec& spec, int64_t max_rows) {
  const MoeSpec w = spec.widest_experts();
  const uint64_t rows = uint64_t(max_rows);
  return align_device(4 * rows * uint64_t(w.n_experts)) + 3 * align_device(4 * rows * uint64_t(w.n_experts_used)) +
         3 * align_device(4 * rows * uint64_t(spec.dim)) + align_device(4 * rows * kPairGroupInts) +
         align_device(4 * (uint64_t(w.n_experts) + rows * uint64_t(w.n_experts_used)));
}

ExpertFfn::ExpertFfn(const ModelSpec& spec, int64_t max_rows, ExpertStore& store, const ExpertFfnOptions& options)
    : spec_(spec),
      max_rows_(max_rows),
      store_(store),
      chunks_(options.chunks),
      trace_(store.all_resident() ? std::string() : options.trace_path,
             {"expert copies (H2D, re-lay)", "experts on the GPU", "experts on the CPU (host)"}) {
  const MoeSpec w = spec.widest_experts();
  for (const LayerSpec& l : spec.layers) {
    if (l.moe.expert_ffn_dim > spec.ffn_dim) {
      fail("an expert {} wide is wider than the model's feed_forward_length {}, whose buffers it shares",
           l.moe.expert_ffn_dim, spec.ffn_dim);
    }
  }
  scratch_ = DeviceBuffer(scratch_bytes(spec, max_rows), "the experts' routing scratch");
  const uint64_t rows = uint64_t(max_rows);
  auto* at = scratch_.as<uint8_t>();
  const auto take = [&](uint64_t bytes) {
    uint8_t* p = at;
    at += align_device(bytes);
    return p;
  };
  logits_ = reinterpret_cast<float*>(take(4 * rows * uint64_t(w.n_experts)));
  chosen_ = reinterpret_cast<int32_t*>(take(4 * rows * uint64_t(w.n_experts_used)));
  weights_ = reinterpret_cast<float*>(take(4 * rows * uint64_t(w.n_experts_used)));
  routed_ = reinterpret_cast<int32_t*>(take(4 * rows * uint64_t(w.n_experts_used)));
  xe_ = reinterpret_cast<float*>(take(4 * rows * uint64_t(spec.dim)));
  ye_ = reinterpret_cast<float*>(take(4 * rows * uint64_t(spec.dim)));
  sum_ = reinterpret_cast<float*>(take(4 * rows * uint64_t(spec.dim)));
  group_ = reinterpret_cast<int32_t*>(take(4 * rows * kPairGroupInts));
  stand_ins_ = reinterpret_cast<int32_t*>(take(4 * (uint64_t(w.n_experts) + rows * uint64_t(w.n_experts_used))));
  masked_weights_ = reinterpret_cast<float*>(stand_ins_ + w.n_experts);
  host_ = PinnedBuffer((3 + kPairGroupInts) * 4 * rows * uint64_t(w.n_experts_used), "the experts' routing transfers");
  start_.resize(size_t(w.n_experts) + 1);
  fill_.resize(size_t(w.n_experts));
  // The CPU takes misses in narrow passes only (decode steps, small batches,
  // trees): a wide pass's expert has rows enough that its copy costs less.
  constexpr int64_t kCpuRowsMax = 64;
  if (!store.all_resident() && options.misses != ExpertMisses::Link) {
    cpu_ = std::make_unique<CpuExperts>(spec, store, options.misses, std::min(max_rows, kCpuRowsMax), options.cpu_threads);
    stand_ins_host_ = PinnedBuffer(4 * (uint64_t(w.n_experts) + rows * uint64_t(w.n_experts_used)), "the experts' stand-ins");
    on_cpu_mark_.resize(size_t(w.n_experts));
  }
}

std::string ExpertFfn::describe() const {
  return store_.describe() + (cpu_ ? ", " + cpu_->describe() : std::string());
}

void ExpertFfn::run(LayerPass& pass, const LayerOnDevice& L, int64_t l, const float* xn, float* x, int64_t n,
                    bool stepwise, const float* post_norm) {
  const LayerSpec& layer = spec_.layers[size_t(l)];
  const MoeSpec& moe = layer.moe;
  const int64_t experts = moe.n_experts, k = moe.n_experts_used, width = moe.expert_ffn_dim, dim = spec_.dim;
  const cudaStream_t stream = pass.stream();
  PassBuffers& act = pass.buffers();
  if (trace_.on() && !trace_.started()) {
    trace_.start(stream);
    store_.trace_copies(&trace_, kCopiesRow);
  }
  // y = m * in over `rows` rows, as the pass multiplies, or column by column as one-token steps do.
  const auto product = [&](const DeviceMatrix& m, const Input& in, int64_t rows, float* y, int64_t y_stride) {
    if (!stepwise) {
      pass.matmul(m, in, rows, y, y_stride, false);
      return;
    }
    MatvecParams p;
    p.w = m;
    p.x = {in.f32, in.q8, in.q8_scales};
    p.y = y;
    p.y_stride = y_stride;
    matvec_stepwise(p, rows, stream);
  };
  const auto uses_gemm = [&](int64_t rows) { return !stepwise && rows >= pass.paths().gemm_from; };

  // The router and its top-k.
  product(L.router, pass.prepare_input(xn, n, dim, uses_gemm(n)), n, logits_, experts);
  if (moe.biases) add_bias_rows(logits_, L.router_bias, n, experts, stream);
  route_top_k(logits_, n, experts, k, moe.gating == ExpertGating::SoftmaxTopK, chosen_, weights_, stream);
  float* out = post_norm ? sum_ : x;
  if (post_norm) NT_CUDA_CHECK(cudaMemsetAsync(sum_, 0, size_t(n * dim) * 4, stream));
  const auto finish = [&] {
    if (post_norm) add_normed(sum_, post_norm, n, dim, spec_.rms_eps, x, stream);
  };
  // Rows that each compute as a one-token step does find their experts on
  // the GPU, all pairs in one launch a matrix; in VRAM for good, no host
  // round trip (decode steps then replay graphs).
  const bool alone = (stepwise || n == 1) && n * k <= max_rows_ && n * k * width <= max_rows_ * spec_.ffn_dim;
  if (alone && store_.all_resident()) {
    each_row_alone(pass, L, l, xn, out, n, store_.slot_of(l), weights_);
    finish();
    return;
  }
  int32_t* chosen = host_.as<int32_t>();
  int32_t* routed = chosen + n * k;
  float* weights = reinterpret_cast<float*>(routed + n * k);
  NT_CUDA_CHECK(cudaMemcpyAsync(chosen, chosen_, size_t(n * k) * 4, cudaMemcpyDeviceToHost, stream));
  const bool cpu_may_help = cpu_ && n <= cpu_->max_rows();
  if (cpu_may_help) {  // what the CPU's experts take
    NT_CUDA_CHECK(cudaMemcpyAsync(weights, weights_, size_t(n * k) * 4, cudaMemcpyDeviceToHost, stream));
    NT_CUDA_CHECK(cudaMemcpyAsync(cpu_->host_rows(), xn, size_t(n * dim) * 4, cudaMemcpyDeviceToHost, stream));
  }
  NT_CUDA_CHECK(cudaStreamSynchronize(stream));
  trace_.collect();

  // The (row, choice) pairs by expert, rows ascending (a counting sort).
  std::fill(start_.begin(), start_.begin() + experts + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) {
    const int32_t e = chosen[i];
    if (e < 0 || e >= experts) fail("internal: the router of layer {} chose expert {} of {}", l, e, experts);
    ++start_[size_t(e) + 1];
  }
  needed_.clear();
  for (int64_t e = 0; e < experts; ++e) {
    if (start_[size_t(e) + 1] > 0) needed_.push_back(int32_t(e));
    start_[size_t(e) + 1] += start_[size_t(e)];
  }
  std::copy(start_.begin(), start_.begin() + experts, fill_.begin());
  for (int64_t i = 0; i < n * k; ++i) routed[fill_[size_t(chosen[i])]++] = int32_t(i);
  std::span<const int32_t> on_gpu = needed_;
  if (cpu_may_help) cpu_->split(l, needed_, start_);
  const bool cpu_part = cpu_may_help && !cpu_->on_cpu().empty();
  if (cpu_part) on_gpu = cpu_->on_gpu();
  // Every expert in VRAM, or the GPU's share held there at once: the chunks.
  if (chunks_ && !alone && !on_gpu.empty() && plan_chunks(l, chosen, n) &&
      (store_.all_resident() || store_.hold(l, on_gpu, stream))) {
    if (cpu_part) {
      each_expert_in_chunks(pass, L, l, xn, out, stand_in_table(l, chosen, weights, n, stream), masked_weights_);
    } else {
      each_expert_in_chunks(pass, L, l, xn, out, store_.slot_of(l), weights_);
    }
    if (!store_.all_resident()) store_.release(stream);
    if (cpu_part) add_cpu_sums(l, routed, weights, n, out, stream);
    finish();
    return;
  }
  if (!cpu_part && alone && store_.hold(l, needed_, stream)) {
    each_row_alone(pass, L, l, xn, out, n, store_.slot_of(l), weights_);
    store_.release(stream);
    finish();
    return;
  }
  // A decode step's GPU experts in one launch a matrix too, the CPU's pairs
  // standing in for one of them and weighted zero; then the CPU's sum.
  if (cpu_part && alone && (on_gpu.empty() || store_.hold(l, on_gpu, stream))) {
    if (!on_gpu.empty()) {
      each_row_alone(pass, L, l, xn, out, n, stand_in_table(l, chosen, weights, n, stream), masked_weights_);
      store_.release(stream);
    }
    add_cpu_sums(l, routed, weights, n, out, stream);
    finish();
    return;
  }
  NT_CUDA_CHECK(cudaMemcpyAsync(routed_, routed, size_t(n * k) * 4, cudaMemcpyHostToDevice, stream));

  // Each expert over its rows, added into x (or, before a post-norm, into sum_).
  cudaEvent_t gpu_end = nullptr;
  if (trace_.on()) {
    const auto [begin, end] = trace_.device_span(fmt::format("layer {}: {} experts", l, on_gpu.size()), kGpuRow);
    NT_CUDA_CHECK(cudaEventRecord(begin, stream));
    gpu_end = end;
  }
  store_.begin_layer(l, on_gpu);
  const bool silu = layer.activation == FfnActivation::Silu;
  for (size_t i = 0; i < on_gpu.size(); ++i) {
    const int64_t e = on_gpu[i], first = start_[size_t(e)], m = start_[size_t(e) + 1] - first;
    const int32_t* pairs = routed_ + first;
    gather_routed_rows(xn, pairs, m, k, dim, xe_, stream);
    const bool gemm = uses_gemm(m);
    const Input in = pass.prepare_input(xe_, m, dim, gemm);
    const ExpertMatrices& w = store_.use(i, stream);
    const bool gated = silu && !moe.biases && !gemm && w.gate.type == w.up.type &&
                       (stepwise || (m <= kMatvecMaxColumns && !pass.int8_gemm_takes(w.gate, m)));
    // Expert e's bias rows on the m outputs of one of its matrices (MoeSpec::biases).
    const auto add_bias = [&](const float* biases, float* y, int64_t cols) {
      if (moe.biases) add_bias_rows(y, biases + e * cols, m, cols, stream);
    };
    if (gated) {  // gate, up and SwiGLU in one mat-vec launch
      MatvecParams p;
      p.w = w.gate;
      p.w_up = w.up;
      p.x = {in.f32, in.q8, in.q8_scales};
      p.y = act.h;
      p.y_stride = width;
      if (stepwise) {
        matvec_stepwise(p, m, stream);
      } else {
        matvec(p, int(m), stream);
      }
    } else {
      product(w.gate, in, m, act.gate, width);
      add_bias(L.gate_exps_bias, act.gate, width);
      product(w.up, in, m, act.up, width);
      add_bias(L.up_exps_bias, act.up, width);
      pass.activate(l, act.gate, act.up, m * width, act.h);
    }
    product(w.down, pass.prepare_input(act.h, m, width, gemm), m, ye_, dim);
    add_bias(L.down_exps_bias, ye_, dim);
    store_.done(i, stream);
    add_routed_rows(ye_, pairs, weights_, m, k, dim, out, stream);
  }
  if (gpu_end) NT_CUDA_CHECK(cudaEventRecord(gpu_end, stream));
  if (cpu_part) add_cpu_sums(l, routed, weights, n, out, stream);
  finish();
}

void ExpertFfn::add_cpu_sums(int64_t l, const int32_t* routed, const float* weights, int64_t n, float* out,
                             cudaStream_t stream) {
  const auto begin = TraceLog::Clock::now();
  cpu_->compute(l, start_, routed, weights, n);  // while the GPU works through what is queued
  trace_.span(fmt::format("layer {}: {} experts over {} rows", l, cpu_->on_cpu().size(), n), kCpuRow,
              trace_.host_us(begin), trace_.host_us(TraceLog::Clock::now()));
  for (const int32_t e : cpu_->on_cpu()) store_.count_cpu_use(l, e);
  const int64_t values = n * spec_.dim;
  NT_CUDA_CHECK(cudaMemcpyAsync(ye_, cpu_->host_sums(), size_t(values) * 4, cudaMemcpyHostToDevice, stream));
  add_floats(ye_, out, values, stream);
}

const int32_t* ExpertFfn::stand_in_table(int64_t l, const int32_t* chosen, const float* weights, int64_t n,
                                         cudaStream_t stream) {
  const int64_t experts = spec_.layers[size_t(l)].moe.n_experts, k = spec_.layers[size_t(l)].moe.n_experts_used;
  std::fill(on_cpu_mark_.begin(), on_cpu_mark_.end(), 0);
  for (const int32_t e : cpu_->on_cpu()) on_cpu_mark_[size_t(e)] = 1;
  int32_t* table = stand_ins_host_.as<int32_t>();
  auto* masked = reinterpret_cast<float*>(table + experts);
  const int32_t* held = store_.host_slot_of(l);
  const int32_t stand_in = held[cpu_->on_gpu()[0]];  // held since hold()
  for (int64_t e = 0; e < experts; ++e) table[e] = held[e] >= 0 ? held[e] : stand_in;
  for (int64_t i = 0; i < n * k; ++i) masked[i] = on_cpu_mark_[size_t(chosen[i])] ? 0.0f : weights[i];
  NT_CUDA_CHECK(cudaMemcpyAsync(stand_ins_, table, size_t(experts) * 4, cudaMemcpyHostToDevice, stream));
  NT_CUDA_CHECK(cudaMemcpyAsync(masked_weights_, masked, size_t(n * k) * 4, cudaMemcpyHostToDevice, stream));
  return stand_ins_;
}

void ExpertFfn::pairs_ffn(LayerPass& pass, const LayerOnDevice& L, int64_t l, const Input& in, int64_t pairs,
                          const int32_t* experts_of, const std::function<void(const MatvecParams&, bool down)>& launch) {
  const LayerSpec& layer = spec_.layers[size_t(l)];
  const bool biases = layer.moe.biases;
  const int64_t width = layer.moe.expert_ffn_dim, dim = spec_.dim;
  const cudaStream_t stream = pass.stream();
  PassBuffers& act = pass.buffers();
  const ExpertMatrices w = store_.slot0(l);
  MatvecParams p;
  p.x = {in.f32, in.q8, in.q8_scales};
  p.y_stride = width;
  p.w = w.gate;
  if (layer.activation == FfnActivation::Silu && !biases && w.gate.type == w.up.type) {  // gate, up and SwiGLU in one launch
    p.w_up = w.up;
    p.y = act.h;
    launch(p, false);
  } else {
    p.y = act.gate;
    launch(p, false);
    if (biases) add_expert_biases(act.gate, experts_of, L.gate_exps_bias, pairs, width, stream);
    p.w = w.up;
    p.y = act.up;
    launch(p, false);
    if (biases) add_expert_biases(act.up, experts_of, L.up_exps_bias, pairs, width, stream);
    pass.activate(l, act.gate, act.up, pairs * width, act.h);
  }
  const Input h = pass.prepare_input(act.h, pairs, width, false);
  MatvecParams down;
  down.w = w.down;
  down.x = {h.f32, h.q8, h.q8_scales};
  down.y = ye_;
  down.y_stride = dim;
  launch(down, true);
  if (biases) add_expert_biases(ye_, experts_of, L.down_exps_bias, pairs, dim, stream);
}

void ExpertFfn::each_row_alone(LayerPass& pass, const LayerOnDevice& L, int64_t l, const float* xn, float* out, int64_t n,
                               const int32_t* slot_of, const float* weights) {
  const int64_t k = spec_.layers[size_t(l)].moe.n_experts_used, dim = spec_.dim, pairs = n * k;
  const cudaStream_t stream = pass.stream();
  pairs_ffn(pass, L, l, pass.prepare_input(xn, n, dim, false), pairs, chosen_, [&](const MatvecParams& p, bool down) {
    // A pair's input is its row's normed row, then (down) its own hidden row.
    matvec_experts(p, ExpertRows{chosen_, slot_of, store_.slot_bytes(), int(k), down}, pairs, stream);
  });
  add_expert_outputs(ye_, chosen_, weights, n, k, dim, out, stream);
}

bool ExpertFfn::plan_chunks(int64_t l, const int32_t* chosen, int64_t n) {
  const MoeSpec& moe = spec_.layers[size_t(l)].moe;
  const int64_t k = moe.n_experts_used;
  // The rows whose pairs fit the pass's buffers at once (each_row_alone's bound).
  const int64_t per_group = std::min(max_rows_ / k, max_rows_ * spec_.ffn_dim / (k * moe.expert_ffn_dim));
  if (per_group < 1) return false;
  int32_t* records = host_.as<int32_t>() + 3 * n * k;  // after the chosen experts, the sorted pairs and the weights
  const int64_t reads = group_pairs_by_expert(chosen, n, k, moe.n_experts, per_group, kMatvecMaxColumns, records, groups_);
  const uint64_t needed = needed_.size();  // each read once by the products apart
  return uint64_t(reads - int64_t(needed)) * store_.slot_bytes() <= needed * kLaunchBytes;
}

void ExpertFfn::each_expert_in_chunks(LayerPass& pass, const LayerOnDevice& L, int64_t l, const float* xn, float* out,
                                      const int32_t* slot_of, const float* weights) {
  const int64_t k = spec_.layers[size_t(l)].moe.n_experts_used, dim = spec_.dim;
  const cudaStream_t stream = pass.stream();
  for (const PairGroup& g : groups_) {
    NT_CUDA_CHECK(cudaMemcpyAsync(group_, g.at, size_t(g.ints()) * 4, cudaMemcpyHostToDevice, stream));
    PairGroup on_gpu = g;
    on_gpu.at = group_;
    gather_routed_rows(xn, on_gpu.sorted(), g.pairs, k, dim, xe_, stream);
    pairs_ffn(pass, L, l, pass.prepare_input(xe_, g.pairs, dim, false), g.pairs, on_gpu.expert_of(),
              [&](const MatvecParams& p, bool) {
                matvec_expert_chunks(p, on_gpu.chunk_list(), g.chunks, slot_of, store_.slot_bytes(), stream);
              });
    add_expert_outputs(ye_, chosen_ + g.first_row * k, weights + g.first_row * k, g.rows, k, dim, out + g.first_row * dim,
                       stream, on_gpu.place());
  }
}

}  // namespace nt
