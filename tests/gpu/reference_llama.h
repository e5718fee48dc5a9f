// A plain float64 Llama forward pass over weights decoded by the CPU
// reference (quant.h), written for clarity, to check the CUDA runner against.
#pragma once

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "model/rope.h"
#include "quant/quant.h"

namespace nt::test {

class ReferenceLlama {
 public:
  explicit ReferenceLlama(const GgufFile& file) : c_(read_model_spec(file.header(), file.path())) {
    const ModelWeights w = load_model_weights(file, c_);
    embd_ = decode(w.token_embd);
    output_ = decode(w.output);
    output_norm_ = decode(w.output_norm);
    inv_freq_ = rope_inv_freqs(c_, c_.has_rope_freqs_tensor ? reinterpret_cast<const float*>(w.rope_freqs.data) : nullptr);
    for (const auto& lw : w.layers) {
      using enum LayerRole;
      layers_.push_back({decode(lw[AttnNorm]), decode(lw[AttnQ]), decode(lw[AttnK]), decode(lw[AttnV]), decode(lw[AttnOutput]),
                         decode(lw[FfnNorm]), decode(lw[FfnGate]), decode(lw[FfnUp]), decode(lw[FfnDown])});
    }
  }

  const ModelSpec& config() const { return c_; }

  // Logits (vocab_size per token) for every position of `tokens`, from position 0.
  std::vector<std::vector<double>> logits(const std::vector<int32_t>& tokens) const {
    const int64_t n = int64_t(tokens.size()), dim = c_.dim, hd = c_.head_dim;
    const size_t count = tokens.size();
    Rows x(count);
    for (size_t t = 0; t < count; ++t) x[t].assign(embd_.w.begin() + tokens[t] * dim, embd_.w.begin() + (tokens[t] + 1) * dim);
    for (const Layer& L : layers_) {
      Rows xn(count);
      for (size_t t = 0; t < count; ++t) xn[t] = norm(x[t], L.attn_norm);
      Rows q = matmul(L.wq, xn), k = matmul(L.wk, xn);
      const Rows v = matmul(L.wv, xn);
      for (size_t t = 0; t < count; ++t) {
        q[t] = rope(q[t], int64_t(t));
        k[t] = rope(k[t], int64_t(t));
      }
      const int64_t group = c_.n_heads / c_.n_kv_heads;
      Rows att(count, std::vector<double>(size_t(c_.q_dim())));
      for (int64_t t = 0; t < n; ++t) {
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
            for (int64_t d = 0; d < hd; ++d) att[size_t(t)][size_t(h * hd + d)] += w[size_t(j)] / sum * v[size_t(j)][size_t(kvh * hd + d)];
          }
        }
      }
      add(x, matmul(L.wo, att));
      for (size_t t = 0; t < count; ++t) xn[t] = norm(x[t], L.ffn_norm);
      Rows g = matmul(L.gate, xn);
      const Rows u = matmul(L.up, xn);
      for (size_t t = 0; t < count; ++t) {
        for (size_t i = 0; i < g[t].size(); ++i) g[t][i] = g[t][i] / (1.0 + std::exp(-g[t][i])) * u[t][i];
      }
      add(x, matmul(L.down, g));
    }
    for (size_t t = 0; t < count; ++t) x[t] = norm(x[t], output_norm_);
    return matmul(output_, x);
  }

 private:
  using Rows = std::vector<std::vector<double>>;  // one vector per token
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
  // y[t] = m x[t] for every t. Each row of m is read once for all tokens, and
  // the rows are spread over threads: the real models' references take seconds.
  static Rows matmul(const Matrix& m, const Rows& x) {
    Rows y(x.size(), std::vector<double>(size_t(m.rows)));
    const int64_t n_threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), m.rows / 64));
    std::vector<std::thread> threads;
    for (int64_t i = 0; i < n_threads; ++i) {
      threads.emplace_back([&, i] {
        std::vector<double> row(size_t(m.cols));
        for (int64_t r = m.rows * i / n_threads; r < m.rows * (i + 1) / n_threads; ++r) {
          for (int64_t c = 0; c < m.cols; ++c) row[size_t(c)] = double(m.w[size_t(r * m.cols + c)]);
          for (size_t t = 0; t < x.size(); ++t) {
            double s = 0.0;
            for (int64_t c = 0; c < m.cols; ++c) s += row[size_t(c)] * x[t][size_t(c)];
            y[t][size_t(r)] = s;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
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
  static void add(Rows& x, const Rows& y) {
    for (size_t t = 0; t < x.size(); ++t) {
      for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += y[t][i];
    }
  }

  ModelSpec c_;
  Matrix embd_, output_, output_norm_;
  std::vector<float> inv_freq_;
  std::vector<Layer> layers_;
};

}  // namespace nt::test
