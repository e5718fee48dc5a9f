#include "quant/kquant_search.h"

#include <algorithm>
#include <cmath>

#include "core/half.h"

namespace nt::kquant {
namespace {

// Largest finite fp16: super-block scales saturate rather than become inf.
constexpr float kMaxHalf = 65504.0f;

// Nearest integer (ties to even) of v clamped to [lo, hi]; NaN gives lo.
// Adding and removing 1.5 * 2^23 rounds in the FPU, far cheaper than lrint.
int clamp_round(float v, int lo, int hi) {
  const float c = std::min(std::max(float(lo), v), float(hi));
  return int((c + 12582912.0f) - 12582912.0f);
}

// Weighted sums for the least-squares fit of x ~ a * code + b.
struct Sums {
  float w = 0, wl = 0, wl2 = 0, wx = 0, wlx = 0, wx2 = 0;
  void add(float weight, float code, float x) {
    w += weight;
    wl += weight * code;
    wl2 += weight * code * code;
    wx += weight * x;
    wlx += weight * code * x;
    wx2 += weight * x * x;
  }
};

// ---- asymmetric sub-blocks: x ~ a * code + b with a >= 0, b <= 0 ----

struct Affine {
  float a, b;
};

float weighted_error(const float* x, const float* w, int n, const Affine& f, const uint8_t* code) {
  float err = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = f.a * float(code[i]) + f.b - x[i];
    err += w[i] * diff * diff;
  }
  return err;
}

void affine_codes(const float* x, int n, const Affine& f, int code_max, uint8_t* code) {
  const float inv = f.a > 0 ? 1.0f / f.a : 0.0f;
  for (int i = 0; i < n; ++i) code[i] = uint8_t(clamp_round((x[i] - f.b) * inv, 0, code_max));
}

// Best a, b for fixed codes. The offset b may not be positive (the formats
// store only a subtracted minimum), so a positive optimum is pinned to 0.
bool solve_affine(const Sums& s, Affine& f) {
  const float det = s.w * s.wl2 - s.wl * s.wl;
  if (det > 0) {
    f.a = (s.w * s.wlx - s.wl * s.wx) / det;
    f.b = (s.wl2 * s.wx - s.wl * s.wlx) / det;
    if (f.b <= 0 && f.a >= 0) return true;
  }
  if (s.wl2 <= 0) return false;
  f.a = std::max(0.0f, s.wlx / s.wl2);
  f.b = 0;
  return true;
}

// sum w (a * code + b - x)^2 expanded over the sums: one pass per candidate.
float affine_error(const Sums& s, const Affine& f) {
  return f.a * f.a * s.wl2 + 2 * f.a * f.b * s.wl + f.b * f.b * s.w - 2 * f.a * s.wlx - 2 * f.b * s.wx + s.wx2;
}

// Least-squares a, b for codes round((x - origin) * inv); false if degenerate.
bool fit_codes(const float* x, const float* w, int n, float origin, float inv, int code_max, Affine& f,
               float& err) {
  Sums s;
  for (int i = 0; i < n; ++i) s.add(w[i], float(clamp_round((x[i] - origin) * inv, 0, code_max)), x[i]);
  if (!solve_affine(s, f)) return false;
  err = affine_error(s, f);
  return true;
}

// Searches code grids around the min/max mapping (scale multipliers within
// +-1 code of the plain one), refits a and b by weighted least squares for
// each, then polishes the winner by alternating code assignment and refits.
Affine fit_affine_sub_block(const float* x, const float* w, int n, int code_max) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);
  if (!(hi > lo)) return {0, lo};

  const float range = hi - lo;
  Affine best{range / float(code_max), lo};
  float best_err = INFINITY;
  Affine f;
  float err;
  for (int step = -10; step <= 10; ++step) {
    const float inv = (float(code_max) + 0.1f * float(step)) / range;
    if (fit_codes(x, w, n, lo, inv, code_max, f, err) && err < best_err) {
      best_err = err;
      best = f;
    }
  }
  for (int round = 0; round < 3 && best.a > 0; ++round) {
    if (!fit_codes(x, w, n, best.b, 1.0f / best.a, code_max, f, err) || !(err < best_err)) break;
    best_err = err;
    best = f;
  }
  return best;
}

// ---- symmetric sub-blocks: x ~ a * code ----

float symmetric_error(const float* x, const float* w, int n, float a, const int8_t* code) {
  float err = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = a * float(code[i]) - x[i];
    err += w[i] * diff * diff;
  }
  return err;
}

void symmetric_codes(const float* x, int n, float a, int code_neg, int8_t* code) {
  const float inv = a != 0 ? 1.0f / a : 0.0f;
  for (int i = 0; i < n; ++i) code[i] = int8_t(clamp_round(x[i] * inv, -code_neg, code_neg - 1));
}

// Least-squares a for codes round(x * inv); score = sum(w x^2) - error.
float fit_symmetric_codes(const float* x, const float* w, int n, float inv, int code_neg, float& score) {
  float wlx = 0, wl2 = 0;
  for (int i = 0; i < n; ++i) {
    const float code = float(clamp_round(x[i] * inv, -code_neg, code_neg - 1));
    wlx += w[i] * code * x[i];
    wl2 += w[i] * code * code;
  }
  score = wl2 > 0 ? wlx * wlx / wl2 : 0.0f;
  return wl2 > 0 ? wlx / wl2 : 0.0f;
}

// Tries scales that put the largest-magnitude element near either end of the
// (asymmetric) code range, refits each by least squares, keeps the best and
// polishes it like the affine search.
float fit_symmetric_sub_block(const float* x, const float* w, int n, int code_neg) {
  float peak = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(peak)) peak = x[i];
  }
  if (peak == 0) return 0;

  float best = 0, best_score = 0, score;
  for (const float end : {-float(code_neg), float(code_neg - 1)}) {
    for (int step = -9; step <= 9; ++step) {
      const float a = fit_symmetric_codes(x, w, n, (end + 0.1f * float(step)) / peak, code_neg, score);
      if (score > best_score) {
        best_score = score;
        best = a;
      }
    }
  }
  for (int round = 0; round < 3 && best != 0; ++round) {
    const float a = fit_symmetric_codes(x, w, n, 1.0f / best, code_neg, score);
    if (!(score > best_score)) break;
    best_score = score;
    best = a;
  }
  return best;
}

float to_stored_half(float v, uint16_t& bits) {
  bits = fp32_to_fp16(std::clamp(v, -kMaxHalf, kMaxHalf));
  return fp16_to_fp32(bits);
}

}  // namespace

void error_weights(const float* x, const float* importance, float* weight) {
  float sum_sq = 0;
  for (int i = 0; i < kQK_K; ++i) sum_sq += x[i] * x[i];
  const float sigma2 = sum_sq / float(kQK_K);
  for (int i = 0; i < kQK_K; ++i) {
    const float magnitude = std::sqrt(sigma2 + x[i] * x[i]);
    weight[i] = importance ? importance[i] * magnitude : magnitude;
  }
}

void fit_affine_superblock(const float* x, const float* weight, const AffineGeometry& g, AffineSuperBlock& out) {
  const int n_sub = kQK_K / g.sub_size;
  Affine fit[kMaxSubBlocks];
  float max_a = 0, max_offset = 0;
  for (int j = 0; j < n_sub; ++j) {
    fit[j] = fit_affine_sub_block(x + j * g.sub_size, weight + j * g.sub_size, g.sub_size, g.code_max);
    max_a = std::max(max_a, fit[j].a);
    max_offset = std::max(max_offset, -fit[j].b);
  }
  const float d = to_stored_half(max_a / float(g.scale_max), out.d);
  const float dmin = to_stored_half(max_offset / float(g.scale_max), out.dmin);

  // Round each sub-block's a and -b to the integer grids, then try the
  // neighbouring integers too: rounding them separately ignores how the
  // codes shift, and small scales lose a lot to rounding.
  for (int j = 0; j < n_sub; ++j) {
    const float* xs = x + j * g.sub_size;
    const float* ws = weight + j * g.sub_size;
    uint8_t* code = out.code + j * g.sub_size;
    const int sc0 = d > 0 ? clamp_round(fit[j].a / d, 0, g.scale_max) : 0;
    const int mn0 = dmin > 0 ? clamp_round(-fit[j].b / dmin, 0, g.scale_max) : 0;
    float best_err = INFINITY;
    for (int sc = std::max(0, sc0 - 1); sc <= std::min(g.scale_max, sc0 + 1); ++sc) {
      for (int mn = std::max(0, mn0 - 1); mn <= std::min(g.scale_max, mn0 + 1); ++mn) {
        const Affine f{d * float(sc), -(dmin * float(mn))};
        uint8_t trial[kQK_K];
        affine_codes(xs, g.sub_size, f, g.code_max, trial);
        const float err = weighted_error(xs, ws, g.sub_size, f, trial);
        if (!(err >= best_err)) {  // also takes a NaN error (bad input) rather than nothing
          best_err = err;
          out.scale[j] = uint8_t(sc);
          out.min[j] = uint8_t(mn);
          std::copy(trial, trial + g.sub_size, code);
        }
      }
    }
  }
}

void fit_symmetric_superblock(const float* x, const float* weight, const SymmetricGeometry& g,
                              SymmetricSuperBlock& out) {
  const int n_sub = kQK_K / g.sub_size;
  float a[kMaxSubBlocks];
  float peak = 0;
  for (int j = 0; j < n_sub; ++j) {
    a[j] = fit_symmetric_sub_block(x + j * g.sub_size, weight + j * g.sub_size, g.sub_size, g.code_neg);
    if (std::fabs(a[j]) > std::fabs(peak)) peak = a[j];
  }
  // The largest sub-block scale maps to the most negative integer scale.
  const float d = to_stored_half(peak / -float(g.scale_neg), out.d);

  for (int j = 0; j < n_sub; ++j) {
    const float* xs = x + j * g.sub_size;
    const float* ws = weight + j * g.sub_size;
    int8_t* code = out.code + j * g.sub_size;
    const int sc0 = d != 0 ? clamp_round(a[j] / d, -g.scale_neg, g.scale_neg - 1) : 0;
    float best_err = INFINITY;
    for (int sc = std::max(-g.scale_neg, sc0 - 1); sc <= std::min(g.scale_neg - 1, sc0 + 1); ++sc) {
      int8_t trial[kQK_K];
      symmetric_codes(xs, g.sub_size, d * float(sc), g.code_neg, trial);
      const float err = symmetric_error(xs, ws, g.sub_size, d * float(sc), trial);
      if (!(err >= best_err)) {  // also takes a NaN error (bad input) rather than nothing
        best_err = err;
        out.scale[j] = int8_t(sc);
        std::copy(trial, trial + g.sub_size, code);
      }
    }
  }
}

}  // namespace nt::kquant
