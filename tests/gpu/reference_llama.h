// A plain float64 Llama forward pass over weights decoded by the CPU
// reference (quant.h), written for clarity, to check the CUDA runner against.
#pragma once

#include <cmath>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/llama_config.h"
#include "model/llama_weights.h"
#include "model/rope.h"
#include "quant/quant.h"

namespace nt::test {

class ReferenceLlama {
 public:
  explicit ReferenceLlama(const GgufFile& file) : c_(read_llama_config(file.header(), file.path())) {
    const LlamaWeights w = load_llama_weights(file, c_);
    embd_ = decode(w.token_embd);
    output_ = decode(w.output);
    output_norm_ = decode(w.output_norm);
    inv_freq_ = rope_inv_freqs(c_, c_.has_rope_freqs_tensor ? reinterpret_cast<const float*>(w.rope_freqs.data) : nullptr);
    for (const auto& lw : w.layers) {
      layers_.push_back({decode(lw.attn_norm), decode(lw.wq), decode(lw.wk), decode(lw.wv), decode(lw.wo),
                         decode(lw.ffn_norm), decode(lw.w_gate), decode(lw.w_up), decode(lw.w_down)});
    }
  }

  const LlamaConfig& config() const { return c_; }

  // Logits (vocab_size per token) for every position of `tokens`, from position 0.
  std::vector<std::vector<double>> logits(const std::vector<int32_t>& tokens) const {
    const int64_t n = int64_t(tokens.size()), dim = c_.dim, hd = c_.head_dim;
    const size_t count = tokens.size();
    std::vector<std::vector<double>> x(count);
    for (size_t t = 0; t < count; ++t) x[t].assign(embd_.w.begin() + tokens[t] * dim, embd_.w.begin() + (tokens[t] + 1) * dim);
    for (const Layer& L : layers_) {
      std::vector<std::vector<double>> q(count), k(count), v(count);
      for (int64_t t = 0; t < n; ++t) {
        const auto xn = norm(x[size_t(t)], L.attn_norm);
        q[size_t(t)] = rope(matvec(L.wq, xn), t);
        k[size_t(t)] = rope(matvec(L.wk, xn), t);
        v[size_t(t)] = matvec(L.wv, xn);
      }
      const int64_t group = c_.n_heads / c_.n_kv_heads;
      for (int64_t t = 0; t < n; ++t) {
        std::vector<double> att(size_t(c_.q_dim()));
        for (int64_t h = 0; h < c_.n_heads; ++h) {
          const int64_t kvh = h / group;
          std::vector<double> w(size_t(t + 1));
          double m = -INFINITY, sum = 0.0;
          for (int64_t j = 0; j <= t; ++j) {
            double dot = 0.0;
            for (int64_t d = 0; d < hd; ++d) dot += q[size_t(t)][size_t(h * hd + d)] * k[size_t(j)][size_t(kvh * hd + d)];
            w[size_t(j)] = dot / std::sqrt(double(hd));
            m = std::max(m, w[size_t(j)]);
          }
          for (double& e : w) sum += (e = std::exp(e - m));
          for (int64_t j = 0; j <= t; ++j) {
            for (int64_t d = 0; d < hd; ++d) att[size_t(h * hd + d)] += w[size_t(j)] / sum * v[size_t(j)][size_t(kvh * hd + d)];
          }
        }
        add(x[size_t(t)], matvec(L.wo, att));
        const auto xn = norm(x[size_t(t)], L.ffn_norm);
        auto g = matvec(L.gate, xn);
        const auto u = matvec(L.up, xn);
        for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
        add(x[size_t(t)], matvec(L.down, g));
      }
    }
    std::vector<std::vector<double>> out;
    for (int64_t t = 0; t < n; ++t) out.push_back(matvec(output_, norm(x[size_t(t)], output_norm_)));
    return out;
  }

 private:
  struct Matrix {
    std::vector<float> w;
    int64_t rows = 0, cols = 0;
  };
  struct Layer {
    Matrix attn_norm, wq, wk, wv, wo, ffn_norm, gate, up, down;
  };

  static Matrix decode(const WeightRef& r) {
    Matrix m{std::vector<float>(size_t(r.rows * r.cols)), r.rows, r.cols};
    for (int64_t i = 0; i < r.rows; ++i) dequantize_row(r.type, r.data + size_t(i) * r.row_stride(), m.w.data() + i * r.cols, r.cols);
    return m;
  }
  static std::vector<double> matvec(const Matrix& m, const std::vector<double>& x) {
    std::vector<double> y(size_t(m.rows));
    for (int64_t r = 0; r < m.rows; ++r) {
      double s = 0.0;
      for (int64_t i = 0; i < m.cols; ++i) s += double(m.w[size_t(r * m.cols + i)]) * x[size_t(i)];
      y[size_t(r)] = s;
    }
    return y;
  }
  std::vector<double> norm(const std::vector<double>& x, const Matrix& weight) const {
    double ss = 0.0;
    for (double e : x) ss += e * e;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + double(c_.rms_eps));
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * double(weight.w[i]);
    return y;
  }
  std::vector<double> rope(std::vector<double> x, int64_t pos) const {
    for (size_t head = 0; head < x.size() / size_t(c_.head_dim); ++head) {
      for (int64_t i = 0; i < c_.rope_dim / 2; ++i) {
        double& a = x[head * size_t(c_.head_dim) + size_t(2 * i)];
        double& b = x[head * size_t(c_.head_dim) + size_t(2 * i + 1)];
        const double angle = double(pos) * double(inv_freq_[size_t(i)]);
        const double a2 = a * std::cos(angle) - b * std::sin(angle), b2 = a * std::sin(angle) + b * std::cos(angle);
        a = a2;
        b = b2;
      }
    }
    return x;
  }
  static void add(std::vector<double>& x, const std::vector<double>& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  LlamaConfig c_;
  Matrix embd_, output_, output_norm_;
  std::vector<float> inv_freq_;
  std::vector<Layer> layers_;
};

}  // namespace nt::test
