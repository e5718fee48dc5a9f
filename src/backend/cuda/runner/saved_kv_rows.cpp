#include "backend/cuda/runner/saved_kv_rows.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "core/error.h"

namespace nt {
namespace {

constexpr int64_t kRowsPerRound = 64;

// The staging of one round, on the device and its pinned mirror:
// [layer ids][row pages][row positions][K: layer, row, kv_dim][V: the same].
class Staging {
 public:
  Staging(const KvRowsParams& caches, int n_layers) : p_(caches), layers_(n_layers) {
    kv_dim_ = uint64_t(caches.n_kv_heads) * uint64_t(caches.head_dim);
    ints_ = align_device(4 * uint64_t(n_layers)) + 2 * align_device(4 * uint64_t(kRowsPerRound));
    rows_bytes_ = align_device(uint64_t(n_layers) * uint64_t(kRowsPerRound) * kv_dim_ * 2);
    device_ = DeviceBuffer(ints_ + 2 * rows_bytes_, "the saved KV rows' staging");
    host_ = PinnedBuffer(device_.size(), "the saved KV rows' staging");
    auto* dev = device_.as<uint8_t>();
    p_.layers = reinterpret_cast<const int32_t*>(dev);
    p_.n_layers = n_layers;
    p_.row_page = reinterpret_cast<const int32_t*>(dev + align_device(4 * uint64_t(n_layers)));
    p_.row_pos = p_.row_page + align_device(4 * uint64_t(kRowsPerRound)) / 4;
    p_.k_staging = reinterpret_cast<uint16_t*>(dev + ints_);
    p_.v_staging = p_.k_staging + rows_bytes_ / 2;
    std::iota(host_at<int32_t>(p_.layers), host_at<int32_t>(p_.layers) + n_layers, 0);
  }

  // `rows` as this round's: their pages and positions copied in on `stream`.
  void describe(std::span<const int64_t> rows, cudaStream_t stream) {
    p_.n_rows = int64_t(rows.size());
    auto* pages = host_at<int32_t>(p_.row_page);
    auto* positions = host_at<int32_t>(p_.row_pos);
    for (size_t r = 0; r < rows.size(); ++r) {
      pages[r] = int32_t(rows[r] / p_.page_size);
      positions[r] = int32_t(rows[r] % p_.page_size);
    }
    NT_CUDA_CHECK(cudaMemcpyAsync(device_.get(), host_.as<void>(), ints_, cudaMemcpyHostToDevice, stream));
  }

  // Row r of layer l's K (or V) in the host mirror.
  uint16_t* host_row(bool v, int64_t layer, int64_t r) {
    uint16_t* base = host_at<uint16_t>(v ? p_.v_staging : p_.k_staging);
    return base + (uint64_t(layer) * uint64_t(p_.n_rows) + uint64_t(r)) * kv_dim_;
  }
  // Bytes of the round's K (or V) rows: layers x rows packed.
  uint64_t used() const { return uint64_t(layers_) * uint64_t(p_.n_rows) * kv_dim_ * 2; }
  void copy(bool up, cudaStream_t stream) {
    for (uint16_t* staged : {p_.k_staging, p_.v_staging}) {
      void* host = host_at<uint16_t>(staged);
      NT_CUDA_CHECK(up ? cudaMemcpyAsync(staged, host, used(), cudaMemcpyHostToDevice, stream)
                       : cudaMemcpyAsync(host, staged, used(), cudaMemcpyDeviceToHost, stream));
    }
  }
  const KvRowsParams& params() const { return p_; }
  uint64_t kv_dim() const { return kv_dim_; }

 private:
  template <class T>
  T* host_at(const void* device_ptr) {
    return reinterpret_cast<T*>(host_.as<uint8_t>() + (static_cast<const uint8_t*>(device_ptr) - device_.as<uint8_t>()));
  }

  KvRowsParams p_;
  int layers_;
  uint64_t kv_dim_ = 0, ints_ = 0, rows_bytes_ = 0;
  DeviceBuffer device_;
  PinnedBuffer host_;
};

void check_size(const KvRowsParams& caches, int n_layers, size_t rows, size_t bytes) {
  if (bytes != rows * saved_row_bytes(caches, n_layers)) {
    fail("KV rows: {} bytes for {} positions of {} bytes", bytes, rows, saved_row_bytes(caches, n_layers));
  }
}

}  // namespace

uint64_t saved_row_bytes(const KvRowsParams& caches, int n_layers) {
  return 2 * uint64_t(n_layers) * uint64_t(caches.n_kv_heads) * uint64_t(caches.head_dim) * 2;
}

void read_saved_rows(const KvRowsParams& caches, int n_layers, std::span<const int64_t> rows, std::span<uint8_t> out,
                     cudaStream_t stream) {
  check_size(caches, n_layers, rows.size(), out.size());
  if (rows.empty()) return;
  Staging staging(caches, n_layers);
  const size_t row_bytes = staging.kv_dim() * 2;
  for (size_t at = 0; at < rows.size(); at += size_t(kRowsPerRound)) {
    const std::span<const int64_t> round = rows.subspan(at, std::min(rows.size() - at, size_t(kRowsPerRound)));
    staging.describe(round, stream);
    kv_rows_to_staging(staging.params(), stream);
    staging.copy(false, stream);
    NT_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t r = 0; r < round.size(); ++r) {
      uint8_t* position = out.data() + (at + r) * saved_row_bytes(caches, n_layers);
      for (int part = 0; part < 2 * n_layers; ++part) {
        std::memcpy(position + size_t(part) * row_bytes, staging.host_row(part >= n_layers, part % n_layers, int64_t(r)), row_bytes);
      }
    }
  }
}

void write_saved_rows(const KvRowsParams& caches, int n_layers, std::span<const int64_t> rows, std::span<const uint8_t> in,
                      cudaStream_t stream) {
  check_size(caches, n_layers, rows.size(), in.size());
  if (rows.empty()) return;
  Staging staging(caches, n_layers);
  const size_t row_bytes = staging.kv_dim() * 2;
  for (size_t at = 0; at < rows.size(); at += size_t(kRowsPerRound)) {
    const std::span<const int64_t> round = rows.subspan(at, std::min(rows.size() - at, size_t(kRowsPerRound)));
    staging.describe(round, stream);
    for (size_t r = 0; r < round.size(); ++r) {
      const uint8_t* position = in.data() + (at + r) * saved_row_bytes(caches, n_layers);
      for (int part = 0; part < 2 * n_layers; ++part) {
        std::memcpy(staging.host_row(part >= n_layers, part % n_layers, int64_t(r)), position + size_t(part) * row_bytes, row_bytes);
      }
    }
    staging.copy(true, stream);
    kv_rows_from_staging(staging.params(), stream);
    NT_CUDA_CHECK(cudaStreamSynchronize(stream));  // the pinned mirror is rewritten next round
  }
}

}  // namespace nt
