#include "backend/cuda/runner/layer_pass.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/kernels/dequantize.h"
#include "backend/cuda/kernels/family_ops.h"
#include "model/rope.h"

namespace nt {

LayerPass::LayerPass(const ModelSpec& config, int64_t context, PassBuffers& act, Gemm& gemm, const KvPool& pool,
                     int multiprocessors, PassKernelChoices choices, ResidualSum residual, cudaStream_t stream)
    : config_(config),
      context_(context),
      act_(act),
      gemm_(gemm),
      pool_(pool),
      multiprocessors_(multiprocessors),
      choices_(choices),
      residual_(residual),
      stream_(stream) {
  for (const LayerSpec& layer : config.layers) rope_magnitudes_.push_back(rope_magnitude(layer.attention.rope));
}

Input LayerPass::prepare_input(const float* x, int64_t n, int64_t cols, bool use_gemm, int64_t first_row) {
  if (use_gemm) {
    convert_f32_to_f16(x, n * cols, act_.f16, stream_);
    return Input{x, nullptr, nullptr, act_.f16, cols};
  }
  if (cols % 32 != 0) return Input{x, nullptr, nullptr, nullptr, cols};  // only float weights have such rows: f32 input
  int8_t* q8 = act_.q8 + first_row * cols;
  float2* scales = act_.q8_scales + first_row * cols / 32;
  quantize_activations(x, n, cols, q8, scales, stream_);
  return Input{x, q8, scales, nullptr, cols};
}

NormSuperBlocks LayerPass::super_block_buffers(int64_t n, int64_t cols) const {
  // The sums first (16-byte copies), then the scales: 9/64 of a byte an
  // element, within the per-32 scales' quarter.
  auto* sums = reinterpret_cast<uint16_t*>(act_.q8_scales);
  return {act_.q8, reinterpret_cast<float*>(sums + n * cols / 16), sums};
}

Input LayerPass::super_input(const float* x, int64_t n, int64_t cols) {
  const NormSuperBlocks b = super_block_buffers(n, cols);
  quantize_super_blocks(x, n, cols, b.q8, b.scales, b.sums, stream_);
  return Input{x, nullptr, nullptr, nullptr, cols, {b.q8, b.scales, b.sums}};
}

Input LayerPass::norm_input(const float* weight, int64_t n, bool use_gemm, bool super, bool normed_already) {
  const ModelSpec& c = config_;
  if (super && !normed_already) {  // one launch: each row read once, no f32 copy
    const NormSuperBlocks b = super_block_buffers(n, c.dim);
    rms_norm_super_blocks(act_.x, weight, n, c.dim, c.rms_eps, b, stream_);
    return Input{nullptr, nullptr, nullptr, nullptr, c.dim, {b.q8, b.scales, b.sums}};
  }
  if (!normed_already) {
    rms_norm(act_.x, weight, n, c.dim, c.rms_eps, act_.xn, use_gemm ? nullptr : act_.q8, act_.q8_scales, stream_);
  }
  if (use_gemm) convert_f32_to_f16(act_.xn, n * c.dim, act_.f16, stream_);
  return super ? super_input(act_.xn, n, c.dim) : Input{act_.xn, act_.q8, act_.q8_scales, act_.f16, c.dim};
}

bool LayerPass::super_blocks_take(std::initializer_list<const DeviceMatrix*> matrices, int64_t n) const {
  if (!choices_.super_block_activations) return false;
  for (const DeviceMatrix* m : matrices) {
    if (!int8_gemm_takes(*m, n) || !quantized_gemm_takes_super_blocks(m->type)) return false;
  }
  return true;
}

QuantizedGemmParams LayerPass::int8_gemm_params(const DeviceMatrix& m, const Input& in, int64_t n, float* y, int64_t y_stride,
                                                bool accumulate) {
  QuantizedGemmParams p;
  p.w = m;
  p.x = {in.f32, in.q8, in.q8_scales};
  p.xs = in.xs;
  p.n_tokens = n;
  p.y = y;
  p.y_stride = y_stride;
  p.accumulate = accumulate;
  p.scratch = gemm_.scratch().as<float>();
  p.scratch_bytes = gemm_.scratch().size();
  p.multiprocessors = multiprocessors_;
  p.widest_tile = choices_.int8_gemm_widest_tile;
  return p;
}

void LayerPass::matmul(const DeviceMatrix& m, const Input& in, int64_t n, float* y, int64_t y_stride,
                             bool accumulate, const NormOut& norm_out) {
  if (n >= paths_.gemm_from) {
    gemm_.run(m, in.f16, n, y, y_stride, accumulate, stream_);
    return;
  }
  if (int8_gemm_takes(m, n) && (in.q8 || in.xs.q8)) {
    quantized_gemm(int8_gemm_params(m, in, n, y, y_stride, accumulate), stream_);
    return;
  }
  for (int64_t t = 0; t < n; t += kMatvecMaxColumns) {
    const int columns = int(std::min<int64_t>(kMatvecMaxColumns, n - t));
    MatvecParams p;
    p.w = m;
    p.x = {in.f32 + t * in.cols, in.q8 ? in.q8 + t * in.cols : nullptr, in.q8_scales ? in.q8_scales + t * in.cols / 32 : nullptr};
    p.y = y + t * y_stride;
    p.y_stride = y_stride;
    p.residual = accumulate ? p.y : nullptr;
    p.norm_out = norm_out;
    if (choices_.matvec_row_pairs && columns > 1 && columns <= kMatvecPairedMaxColumns) p.warps_per_row = p.rows_per_warp = 2;
    matvec(p, columns, stream_);
  }
}

LayerKv LayerPass::kv(int64_t layer) const {
  const auto elems = [&](int64_t layers) { return kv_page_elems(layers, config_.n_kv_heads, config_.head_dim); };
  if (const KvWindowPlan* w = pool_.window) {
    const int64_t index = w->index[size_t(layer)];
    if (w->windowed[size_t(layer)]) {
      return {pool_.window_k + elems(index), pool_.window_v + elems(index), pool_.window_table, elems(w->window_layers)};
    }
    return {pool_.k + elems(index), pool_.v + elems(index), pool_.table, elems(w->full_layers)};
  }
  const int64_t index = layer - pool_.first_layer;
  return {pool_.k + elems(index), pool_.v + elems(index), pool_.table, elems(pool_.layers)};
}

RopeKvParams LayerPass::rope_shape(const LayerOnDevice& L, int64_t l) const {
  const ModelSpec& c = config_;
  RopeKvParams rope;
  rope.qkv_stride = c.q_dim() + 2 * c.kv_dim();
  rope.inv_freq = L.inv_freq;
  rope.rope_pairs = int(c.rope_dim / 2);
  rope.n_heads = int(c.n_heads);
  rope.n_kv_heads = int(c.n_kv_heads);
  rope.head_dim = int(c.head_dim);
  const LayerKv cache = kv(l);
  rope.k_cache = cache.k;
  rope.v_cache = cache.v;
  rope.paging = cache.every_row();
  rope.table_width = cache.table->width();
  return rope;
}

AttentionParams LayerPass::attention_shape() const {
  const ModelSpec& c = config_;
  AttentionParams shape;
  shape.q_stride = c.q_dim() + 2 * c.kv_dim();
  shape.out_stride = c.q_dim();
  shape.n_heads = int(c.n_heads);
  shape.n_kv_heads = int(c.n_kv_heads);
  shape.head_dim = int(c.head_dim);
  shape.partials = act_.partials;
  // The kernels' own 1/sqrt(head_dim) unless the family scales otherwise.
  if (c.attention_scale != 1.0f / std::sqrt(float(c.head_dim))) shape.scale = c.attention_scale;
  return shape;
}

AttentionParams LayerPass::attention_shape(const LayerOnDevice& L, int64_t l) const {
  AttentionParams shape = attention_shape();
  shape.window = int(spec(l).attention.window);
  if (spec(l).attention.sinks) shape.sinks = L.sinks;
  return shape;
}

bool LayerPass::plain_rope(int64_t l) const {
  const AttentionSpec& a = spec(l).attention;
  return !a.qkv_bias && !a.qk_norm && config_.rope_style == RopeStyle::AdjacentPairs && rope_magnitudes_[size_t(l)] == 1.0f;
}

void LayerPass::rope_and_store(const LayerOnDevice& L, int64_t l, const RopeKvParams& rope) {
  if (plain_rope(l)) {
    rope_and_store_kv(rope, stream_);
    return;
  }
  QkvPrep prep;
  if (spec(l).attention.qkv_bias) {
    prep.q_bias = L.q_bias;
    prep.k_bias = L.k_bias;
    prep.v_bias = L.v_bias;
  }
  if (spec(l).attention.qk_norm) {
    prep.q_norm = L.q_norm;
    prep.k_norm = L.k_norm;
  }
  prep.eps = config_.rms_eps;
  prep.halves = config_.rope_style == RopeStyle::Halves;
  prep.magnitude = rope_magnitudes_[size_t(l)];
  prepare_qkv_and_store(rope, prep, stream_);
}

void LayerPass::activate(int64_t l, const float* gate, const float* up, int64_t n, float* h) {
  switch (spec(l).activation) {
    case FfnActivation::Silu: swiglu(gate, up, n, h, stream_); break;
    case FfnActivation::GeluTanh: geglu(gate, up, n, h, stream_); break;
    case FfnActivation::SwigluOai: swiglu_oai(gate, up, n, h, stream_); break;
  }
}

bool LayerPass::attend(const LayerOnDevice& L, int64_t l, int64_t n, bool use_gemm, const ChunkRows& rows) {
  const ModelSpec& c = config_;
  const int64_t qkv_width = c.q_dim() + 2 * c.kv_dim();
  RopeKvParams rope = rope_shape(L, l);
  const AttentionParams shape = attention_shape(L, l);
  if (rows.token_pos) {  // every row's RoPE and cache store in one launch, each at its position in its sequence
    rope.qkv = act_.qkv;
    rope.n_tokens = n;
    rope.token_pos = rows.token_pos;
    rope.token_row = rows.token_seq;
    rope.token_rope_pos = rows.token_rope_pos;
    rope_and_store(L, l, rope);
  }
  const bool multi = rows.token_pos && attention_multi_sequence_supported(shape.n_heads, shape.n_kv_heads, shape.head_dim);
  bool att_q8 = false;
  for (size_t i = 0; i < rows.seqs.size();) {
    const ChunkSequence& s = rows.seqs[i];
    // Consecutive one-token sequences attend in one launch (a tree's row sees its ancestors apart).
    const auto alone = [&](const ChunkSequence& q) { return q.rows == 1 && q.tree_start < 0; };
    size_t run = 1;
    while (multi && alone(s) && i + run < rows.seqs.size() && alone(rows.seqs[i + run])) ++run;
    AttentionParams att = shape;
    const LayerKv cache = kv(l);
    att.q = act_.qkv + s.first_row * qkv_width;
    att.out = act_.att + s.first_row * c.q_dim();
    att.k_cache = cache.k;
    att.v_cache = cache.v;
    att.paging = cache.paging(s.seq);
    att.pos = s.pos;
    att.n_tokens = s.rows;
    att.max_keys = s.rows == 1 ? s.max_keys : 0;
    att.n_splits = attention_splits(s.rows, att.n_heads, att.n_kv_heads, att.head_dim, s.max_keys, multiprocessors_);
    if (s.tree_start >= 0) {
      att.tree_mask = rows.tree_masks + s.first_row * rows.tree_words;
      att.tree_words = rows.tree_words;
      att.tree_start = s.tree_start;
      att.tree_pos = rows.token_rope_pos + s.first_row;  // the tree's entries are the run's rows
    }
    if (run > 1) {
      att.n_seqs = int64_t(run);
      att.pos = rows.token_pos + s.first_row;
      att.paging.pages = cache.table->table();
      att.seq_rows = rows.token_seq + s.first_row;
      att.table_width = cache.table->width();
      att.max_keys = 0;
      att.n_splits = choices_.sequence_splits ? attention_sequence_splits(att.n_seqs, att.n_heads, att.n_kv_heads,
                                                                          att.head_dim, context_, multiprocessors_)
                                              : 1;
      if (!attention_splits_sequences(att)) att.n_splits = 1;
    } else if (!rows.token_pos) {
      // One sequence of the default path. One token: RoPE, the cache store
      // and wo's q8 input happen inside the attention launch, so Q/K/V,
      // attention and wo follow each other directly.
      if (n == 1 && !use_gemm && plain_rope(l) && attention_decode_fusion_supported(att)) {
        att.rope = {L.inv_freq, int(c.rope_dim / 2), att.q + c.q_dim(), att.q + c.q_dim() + c.kv_dim(), cache.k, cache.v};
        if (matvec_wants_q8(L.wo.type)) {
          att.out_q8 = act_.q8;
          att.out_q8_scales = act_.q8_scales;
          att_q8 = true;
        }
      } else {
        rope.qkv = act_.qkv + s.first_row * qkv_width;
        rope.n_tokens = s.rows;
        rope.pos = s.pos;
        rope.paging = att.paging;
        rope_and_store(L, l, rope);
      }
    }
    attention(att, stream_);
    i += run;
  }
  return att_q8;
}

void LayerPass::chunk_layer(const LayerOnDevice& L, int64_t l, int64_t n, bool use_gemm, bool fold, bool attn_folded,
                                  const ChunkRows& rows, const float* next_norm) {
  const ModelSpec& c = config_;
  const int64_t qkv_width = c.q_dim() + 2 * c.kv_dim();
  const Activations folded_x{nullptr, act_.norm_q8, act_.norm_q8_scales};
  const NormIn folded_in{act_.norm_sumsq, c.rms_eps};
  // x += m * in [+ bias], or with `post_norm` x += norm(m * in [+ bias])
  // (through act.xn, free by then; folds_norms never folds such layers, nor
  // those with a bias); when folding, also the input of the RMSNorm with
  // weight `norm` (if any).
  auto add_to_residual = [&](const DeviceMatrix& m, const Input& in, const float* bias, const float* post_norm,
                             const float* norm) {
    if (post_norm) {
      matmul(m, in, n, act_.xn, c.dim, false);
      if (bias) add_bias_rows(act_.xn, bias, n, c.dim, stream_);
      add_normed(act_.xn, post_norm, n, c.dim, c.rms_eps, act_.x, stream_);
    } else {
      matmul(m, in, n, act_.x, c.dim, residual_.adds_residual,
             fold && norm ? NormOut{norm, act_.norm_q8, act_.norm_q8_scales, act_.norm_sumsq} : NormOut{});
      if (bias) add_bias_rows(act_.x, bias, n, c.dim, stream_);
    }
    if (residual_.reducer) residual_.reducer->sum(act_.x, n * c.dim, stream_);
  };
  const LayerSpec& layer = spec(l);
  const bool silu = layer.activation == FfnActivation::Silu;  // the gated kernels' epilogues compute SwiGLU

  // Attention block: x += [post-norm] Wo * attention(rope([norm] Wqkv * norm(x) [+ b]))
  const bool qkv_super = std::all_of(L.qkv.begin(), L.qkv.end(), [&](const MatrixPart& part) { return super_blocks_take({&part.m}, n); });
  const Input normed = norm_input(L.attn_norm, n, use_gemm, qkv_super, attn_folded);
  if (n == 1 && !use_gemm) {  // one launch for Q, K and V even when their formats differ
    MatvecPartsParams qkv;
    for (const MatrixPart& part : L.qkv) qkv.part[qkv.n_parts++] = {part.m, part.out_offset};
    qkv.x = {act_.xn, act_.q8, act_.q8_scales};
    if (attn_folded) {
      qkv.x = folded_x;
      qkv.norm_in = folded_in;
    }
    qkv.y = act_.qkv;
    matvec_parts(qkv, stream_);
  } else {
    for (const MatrixPart& part : L.qkv) matmul(part.m, normed, n, act_.qkv + part.out_offset, qkv_width, false);
  }

  const bool att_q8 = attend(L, l, n, use_gemm, rows);
  const Input att_in = super_blocks_take({&L.wo}, n) ? super_input(act_.att, n, c.q_dim())
                       : att_q8 ? Input{act_.att, act_.q8, act_.q8_scales, nullptr, c.q_dim()}
                                : prepare_input(act_.att, n, c.q_dim(), use_gemm);
  const float* o_bias = layer.attention.output_bias ? L.o_bias : nullptr;
  add_to_residual(L.wo, att_in, o_bias, layer.post_attention_norm ? L.post_attn_norm : nullptr, L.ffn_norm);

  if (layer.has_experts()) {  // folds_norms never folds such layers: nothing wrote the norm's input
    rms_norm(act_.x, L.ffn_norm, n, c.dim, c.rms_eps, act_.xn, nullptr, nullptr, stream_);
    experts_->run(*this, L, l, act_.xn, act_.x, n, false, layer.post_ffn_norm ? L.post_ffn_norm : nullptr);
    return;
  }
  // Feed-forward block: x += [post-norm] Wdown * (act(Wgate * norm(x)) * (Wup * norm(x)))
  const bool ffn_super = super_blocks_take({&L.gate, &L.up}, n), down_super = super_blocks_take({&L.down}, n);
  const Input ffn_in = norm_input(L.ffn_norm, n, use_gemm, ffn_super, fold);
  const bool gated_int8 = silu && !use_gemm && L.gate.type == L.up.type && int8_gemm_takes(L.gate, n) &&
                          c.ffn_dim % 32 == 0 && gemm_.scratch().size() >= 8 * uint64_t(n) * uint64_t(c.ffn_dim);
  if (silu && !use_gemm && n <= kMatvecMaxColumns && L.gate.type == L.up.type && !int8_gemm_takes(L.gate, n)) {
    MatvecParams p;
    p.w = L.gate;
    p.w_up = L.up;
    p.x = {act_.xn, act_.q8, act_.q8_scales};
    if (fold) {
      p.x = folded_x;
      p.norm_in = folded_in;
    }
    p.y = act_.h;
    p.y_stride = c.ffn_dim;
    matvec(p, int(n), stream_);
  } else if (gated_int8) {
    // Gate and up in one int8 GEMM launch, whose epilogue writes down's
    // input: h in f32 for a down that reads it, else q8.
    const bool h_read = !matvec_wants_q8(L.down.type) || down_super;
    QuantizedGemmParams p = int8_gemm_params(L.gate, ffn_in, n, h_read ? act_.h : nullptr, c.ffn_dim, false);
    p.w_up = L.up;
    if (!h_read) {
      p.y_q8 = act_.q8;
      p.y_q8_scales = act_.q8_scales;
    }
    quantized_gemm(p, stream_);
  } else {
    matmul(L.gate, ffn_in, n, act_.gate, c.ffn_dim, false);
    matmul(L.up, ffn_in, n, act_.up, c.ffn_dim, false);
    activate(l, act_.gate, act_.up, n * c.ffn_dim, act_.h);
  }
  const Input down_in = down_super   ? super_input(act_.h, n, c.ffn_dim)
                        : gated_int8 ? Input{act_.h, act_.q8, act_.q8_scales, nullptr, c.ffn_dim}
                                     : prepare_input(act_.h, n, c.ffn_dim, use_gemm);
  add_to_residual(L.down, down_in, nullptr, layer.post_ffn_norm ? L.post_ffn_norm : nullptr, next_norm);
}

void LayerPass::stepwise_layer(const LayerOnDevice& L, int64_t l, int64_t first, int64_t n, bool fold,
                                     bool attn_folded, const ChunkRows& rows, const float* next_norm) {
  const ModelSpec& c = config_;
  const int64_t s = n - first, dim = c.dim, qkv_width = c.q_dim() + 2 * c.kv_dim();
  float* x = act_.x + first * dim;
  // Row r's folded-norm input, and its plain normalized form.
  const Activations folded_x{nullptr, act_.norm_q8 + first * dim, act_.norm_q8_scales + first * dim / 32};
  const NormIn folded_in{act_.norm_sumsq + first * dim / 32, c.rms_eps};
  float* xn = act_.xn + first * dim;
  int8_t* xn_q8 = act_.q8 + first * dim;
  float2* xn_scales = act_.q8_scales + first * dim / 32;
  const Activations normed{xn, xn_q8, xn_scales};
  const auto norm_of = [&](const float* weight) {
    return NormOut{weight, act_.norm_q8 + first * dim, act_.norm_q8_scales + first * dim / 32, act_.norm_sumsq + first * dim / 32};
  };
  // x += m * in [+ bias], or x += norm(m * in [+ bias]) with `post_norm`, as a one-token step's wo and down do.
  const auto add_to_residual = [&](const DeviceMatrix& m, const Input& in, const float* bias, const float* post_norm,
                                   const float* norm) {
    MatvecParams p;
    p.w = m;
    p.x = {in.f32, in.q8, in.q8_scales};
    p.y = post_norm ? xn : x;
    p.y_stride = dim;
    p.residual = residual_.adds_residual && !post_norm ? x : nullptr;
    if (fold && norm) p.norm_out = norm_of(norm);
    matvec_stepwise(p, s, stream_);
    if (bias) add_bias_rows(p.y, bias, s, dim, stream_);
    if (post_norm) add_normed(xn, post_norm, s, dim, c.rms_eps, x, stream_);
    if (residual_.reducer) residual_.reducer->sum(x, s * dim, stream_);
  };
  const LayerSpec& layer = spec(l);

  // Attention block: x += [post-norm] Wo * attention(rope([norm] Wqkv * norm(x) [+ b]))
  if (!attn_folded) rms_norm(x, L.attn_norm, s, dim, c.rms_eps, xn, xn_q8, xn_scales, stream_);
  MatvecPartsParams qkv;
  for (const MatrixPart& part : L.qkv) qkv.part[qkv.n_parts++] = {part.m, part.out_offset};
  qkv.x = attn_folded ? folded_x : normed;
  if (attn_folded) qkv.norm_in = folded_in;
  qkv.y = act_.qkv + first * qkv_width;
  matvec_parts_stepwise(qkv, s, qkv_width, stream_);
  // Every row's RoPE and cache store, then each row attends as a one-token
  // step at its position does: its key count picks the kernel and the splits.
  RopeKvParams rope = rope_shape(L, l);
  rope.qkv = act_.qkv + first * qkv_width;
  rope.n_tokens = s;
  rope.token_pos = rows.token_pos + first;
  rope.token_row = rows.token_seq + first;
  if (rows.token_rope_pos) rope.token_rope_pos = rows.token_rope_pos + first;
  rope_and_store(L, l, rope);
  // Consecutive rows whose steps take the short-context decode attend in one
  // launch of it (n_seqs rows, each computed as its own launch computes it).
  const bool multi = attention_multi_sequence_supported(int(c.n_heads), int(c.n_kv_heads), int(c.head_dim));
  AttentionParams shorts, first_short;  // the rows' launch, and its first row's own
  shorts.n_seqs = 0;
  const auto flush_shorts = [&] {
    if (shorts.n_seqs > 0) attention(shorts.n_seqs == 1 ? first_short : shorts, stream_);
    shorts.n_seqs = 0;
  };
  for (const ChunkSequence& seq : rows.seqs) {
    if (!seq.stepwise) continue;
    for (int64_t t = 0; t < seq.rows; ++t) {
      const int64_t row = seq.first_row + t;
      AttentionParams att = attention_shape(L, l);
      att.q = act_.qkv + row * qkv_width;
      att.out = act_.att + row * c.q_dim();
      const LayerKv cache = kv(l);
      att.k_cache = cache.k;
      att.v_cache = cache.v;
      att.paging = cache.paging(seq.seq);
      att.pos = rows.token_pos + row;
      att.n_tokens = 1;
      att.max_keys = decode_max_keys(seq.first_pos + t);
      att.n_splits = attention_splits(1, att.n_heads, att.n_kv_heads, att.head_dim, att.max_keys, multiprocessors_);
      att.keys_just_stored = true;
      if (seq.tree_start >= 0) {  // a tree's row: its path's keys, at its path position (trees_run_stepwise)
        att.pos = rows.token_rope_pos + row;
        att.max_keys = decode_max_keys(seq.first_pos);
        att.tree_start = seq.tree_start;
        att.path_parents = rows.path_parents + seq.first_row;
        att.path_self = int(t);
      } else if (multi && attention_decodes_short(att)) {
        if (shorts.n_seqs == 0) {
          first_short = shorts = att;
          shorts.n_seqs = 0;
          shorts.paging.pages = cache.table->table();
          shorts.seq_rows = rows.token_seq + row;
          shorts.table_width = cache.table->width();
          shorts.n_splits = 1;
        }
        shorts.max_keys = std::max(shorts.max_keys, att.max_keys);
        ++shorts.n_seqs;
        continue;
      }
      flush_shorts();
      attention(att, stream_);
    }
  }
  flush_shorts();
  add_to_residual(L.wo, prepare_input(act_.att + first * c.q_dim(), s, c.q_dim(), false, first),
                  layer.attention.output_bias ? L.o_bias : nullptr, layer.post_attention_norm ? L.post_attn_norm : nullptr,
                  L.ffn_norm);

  if (layer.has_experts()) {
    rms_norm(x, L.ffn_norm, s, dim, c.rms_eps, xn, nullptr, nullptr, stream_);
    experts_->run(*this, L, l, xn, x, s, true, layer.post_ffn_norm ? L.post_ffn_norm : nullptr);
    return;
  }
  // Feed-forward block: x += [post-norm] Wdown * (act(Wgate * norm(x)) * (Wup * norm(x)))
  if (!fold) rms_norm(x, L.ffn_norm, s, dim, c.rms_eps, xn, xn_q8, xn_scales, stream_);
  float* h = act_.h + first * c.ffn_dim;
  MatvecParams p;
  p.w = L.gate;
  p.x = fold ? folded_x : normed;
  if (fold) p.norm_in = folded_in;
  p.y_stride = c.ffn_dim;
  if (layer.activation == FfnActivation::Silu && L.gate.type == L.up.type) {
    p.w_up = L.up;
    p.y = h;
    matvec_stepwise(p, s, stream_);
  } else {  // folds_norms never folds these: normed holds the input
    p.y = act_.gate + first * c.ffn_dim;
    matvec_stepwise(p, s, stream_);
    p.w = L.up;
    p.y = act_.up + first * c.ffn_dim;
    matvec_stepwise(p, s, stream_);
    activate(l, act_.gate + first * c.ffn_dim, act_.up + first * c.ffn_dim, s * c.ffn_dim, h);
  }
  add_to_residual(L.down, prepare_input(h, s, c.ffn_dim, false, first), nullptr,
                  layer.post_ffn_norm ? L.post_ffn_norm : nullptr, next_norm);
}

bool LayerPass::stepwise_columns_apart(const LayerOnDevice& L, int64_t l, int64_t n, bool fold) const {
  MatvecPartsParams qkv;
  for (const MatrixPart& part : L.qkv) qkv.part[qkv.n_parts++] = {part.m, part.out_offset};
  qkv.x = {act_.xn, act_.q8, act_.q8_scales};
  // The launches' shapes and forms only: no pointer below is read.
  const auto apart = [&](const DeviceMatrix& m, const DeviceMatrix* up, bool norm_out) {
    MatvecParams p;
    p.w = m;
    if (up) p.w_up = *up;
    if (norm_out) p.norm_out.q8 = act_.norm_q8;
    return matvec_stepwise_columns_apart(p, n);
  };
  const bool gated = spec(l).activation == FfnActivation::Silu && L.gate.type == L.up.type;  // as stepwise_layer takes it
  const bool ffn = gated ? apart(L.gate, &L.up, false) : apart(L.gate, nullptr, false) && apart(L.up, nullptr, false);
  return matvec_parts_stepwise_columns_apart(qkv, n) && apart(L.wo, nullptr, fold) && ffn && apart(L.down, nullptr, fold);
}

void LayerPass::stepwise_head(const DeviceMatrix& output, const float* output_norm, int64_t first, int64_t n, bool fold,
                              int64_t to) {
  const ModelSpec& c = config_;
  const int64_t s = n - first, dim = c.dim;
  MatvecParams p;
  p.w = output;
  if (fold) {  // the last layer's down wrote the final norm's input
    p.x = {nullptr, act_.norm_q8 + first * dim, act_.norm_q8_scales + first * dim / 32};
    p.norm_in = {act_.norm_sumsq + first * dim / 32, c.rms_eps};
  } else {
    p.x = {act_.xn + first * dim, act_.q8 + first * dim, act_.q8_scales + first * dim / 32};
    rms_norm(act_.x + first * dim, output_norm, s, dim, c.rms_eps, act_.xn + first * dim, act_.q8 + first * dim,
             act_.q8_scales + first * dim / 32, stream_);
  }
  p.y = act_.logits + to * c.vocab_size;
  p.y_stride = c.vocab_size;
  matvec_stepwise(p, s, stream_);
}

}  // namespace nt
