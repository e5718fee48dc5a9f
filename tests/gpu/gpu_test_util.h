// Helpers for the GPU tests: device copies of host vectors, random weights in
// any format, and the error measures the tests bound.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/weights/device_matrix.h"
#include "core/half.h"
#include "quant/quant.h"
#include "quant/tensor_type.h"

namespace nt::test {

// The real SmolLM2 file: NT_SMOLLM2_GGUF when set (a copy placed elsewhere on
// the GPU machine), else the default model's download location.
inline std::string smollm2_path() {
  const char* env = std::getenv("NT_SMOLLM2_GGUF");
  return env && *env ? std::string(env) : std::string(NT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The small real models beside the checkout (stories260K, its README):
// NT_SHARED_MODELS when set (copies carried elsewhere on the GPU machine),
// else the directory the build recorded.
inline std::string shared_models_dir() {
  const char* env = std::getenv("NT_SHARED_MODELS");
  return env && *env ? std::string(env) : std::string(NT_SHARED_MODELS);
}

// GPUs this process sees (0 when CUDA cannot count them).
inline int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

inline std::mt19937& rng() {
  static std::mt19937 gen{std::random_device{}()};
  return gen;
}

inline std::vector<float> random_floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng());
  return v;
}

template <typename T>
DeviceBuffer to_device(const std::vector<T>& host) {
  DeviceBuffer d(host.size() * sizeof(T), "test data");
  NT_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer& d, size_t n) {
  std::vector<T> host(n);
  NT_CUDA_CHECK(cudaDeviceSynchronize());
  NT_CUDA_CHECK(cudaMemcpy(host.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// NaN everywhere, so unwritten outputs fail every comparison.
inline DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer d(bytes, "test output");
  NT_CUDA_CHECK(cudaMemset(d.get(), 0xff, bytes));
  return d;
}

// Offsets of the fp16 scale fields inside one block of each quantized format.
inline std::vector<int> half_fields(TensorType type) {
  switch (type) {
    case TensorType::Q4_0: case TensorType::Q5_0: case TensorType::Q8_0: return {0};
    case TensorType::Q4_1: case TensorType::Q5_1: case TensorType::Q4_K: case TensorType::Q5_K: return {0, 2};
    case TensorType::Q2_K: return {80, 82};
    case TensorType::Q3_K: return {108};
    case TensorType::Q6_K: return {208};
    default: return {};
  }
}

// rows x cols of `type` in file layout: random codes (every bit pattern) with
// random finite scales; float formats hold random values.
inline std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols, float scale = 0.02f) {
  const size_t row_size = row_bytes(type, cols);
  std::vector<uint8_t> bytes(row_size * size_t(rows));
  if (type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16) {
    const std::vector<float> v = random_floats(size_t(rows * cols));
    quantize_row(type, v.data(), bytes.data(), rows * cols);
    return bytes;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) b = uint8_t(byte(rng()));
  const auto& info = tensor_type_info(type);
  std::uniform_real_distribution<float> magnitude(0.25f * scale, scale);
  std::bernoulli_distribution negative(0.5);
  std::uniform_int_distribution<int> exponent(118, 124);  // MXFP4 scales 2^-10 .. 2^-4, as the fp16 ones
  for (size_t block = 0; block < bytes.size() / size_t(info.block_bytes); ++block) {
    if (type == TensorType::MXFP4) bytes[block * size_t(info.block_bytes)] = uint8_t(exponent(rng()));
    for (int offset : half_fields(type)) {
      const float v = magnitude(rng()) * (negative(rng()) ? -1.0f : 1.0f);
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(bytes.data() + block * size_t(info.block_bytes) + size_t(offset), &h, 2);
    }
  }
  return bytes;
}

inline std::vector<float> dequantize_matrix(TensorType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  std::vector<float> out(size_t(rows * cols));
  const size_t row_size = row_bytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) dequantize_row(type, bytes.data() + size_t(r) * row_size, out.data() + r * cols, cols);
  return out;
}

// A matrix uploaded through the production path (staging + re-layout).
struct DeviceWeights {
  DeviceBuffer memory;
  DeviceMatrix m;
};

inline DeviceWeights upload_weights(TensorType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                                    uint64_t staging_bytes = 1 << 20) {
  DeviceWeights w;
  w.memory = DeviceBuffer(device_matrix_bytes(type, rows, cols), "test weights");
  NT_CUDA_CHECK(cudaMemset(w.memory.get(), 0xff, w.memory.size()));
  w.m = place_device_matrix(type, rows, cols, w.memory.get());
  DeviceBuffer staging(staging_bytes, "test staging");
  upload_matrix_rows(w.m, 0, rows, bytes.data(), staging.get(), staging.size());
  return w;
}

// The q8 activation format, computed independently on the CPU: per 32
// elements d = max|x| / 127, q = round-half-even(x / d) (as x * (1/d)).
struct Q8 {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<float> values;  // q * d
};

inline Q8 quantize_q8(const std::vector<float>& x) {
  Q8 r;
  r.q.resize(x.size());
  r.values.resize(x.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = int(std::nearbyint(x[b * 32 + i] * inv));
      r.q[b * 32 + i] = int8_t(q);
      r.values[b * 32 + i] = float(q) * d;
      sum += q;
    }
    r.d.push_back(d);
    r.s.push_back(d * float(sum));
  }
  return r;
}

// ||a - b|| / ||b||; NaN anywhere in a gives infinity.
inline double relative_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline const std::vector<TensorType>& all_weight_types() {
  static const std::vector<TensorType> types = {
      TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
      TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
      TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::MXFP4};
  return types;
}

inline bool is_float_type(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16; }

}  // namespace nt::test
