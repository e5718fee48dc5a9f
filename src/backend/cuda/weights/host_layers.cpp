#include "backend/cuda/weights/host_layers.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace nt {
namespace {

constexpr int64_t kMirrorRows = 128;  // rows per staging round trip

}  // namespace

HostLayers::HostLayers(const ModelSpec& config, const ModelWeights& file_weights, std::span<const int64_t> layers,
                       std::span<const uint8_t* const> pinned, std::span<const LayerRead> reads, const float* rope_freq_factors,
                       int64_t pages, const KvRowsParams& device, int64_t max_rows, int threads)
    : config_(config),
      index_(size_t(config.n_layers), -1),
      pool_rows_(pages * device.page_size),
      pool_(threads),
      layer_(config, rope_freq_factors, max_rows),
      x_(size_t(max_rows) * size_t(config.dim) * sizeof(float), "the hybrid pass's hidden-state hand-off") {
  x_on_device_ = static_cast<float*>(x_.device_pointer());
  for (size_t i = 0; i < layers.size(); ++i) {
    const int64_t l = layers[i];
    if (!pinned[i]) fail("layer {}: the CPU computes only layers with a pinned RAM-tier copy", l);
    std::map<const GgufTensorInfo*, uint64_t> offset;
    for (const LayerRead::Tensor& t : reads[size_t(l)].tensors) offset[t.info] = t.staging_offset;
    LayerWeights w = file_weights.layers[size_t(l)];
    for (WeightRef& ref : w.by_role) {
      if (!ref.info) continue;
      // A layer's read holds every "blk.N." tensor, norms included: the runner keeps no pointer into the file.
      const auto at = offset.find(ref.info);
      if (at == offset.end()) fail("layer {}: tensor {} is not in the layer's pinned copy", l, ref.info->name);
      ref.data = pinned[i] + at->second;
    }
    index_[size_t(l)] = int(weights_.size());
    all_ranks_.push_back(int64_t(weights_.size()));
    layer_ids_.push_back(int32_t(l));
    weights_.push_back(w);
  }
  const size_t cache = weights_.size() * size_t(pool_rows_) * size_t(config_.kv_dim());
  k_cache_.assign(cache, 0);
  v_cache_.assign(cache, 0);

  device_ = device;
  device_.n_layers = int(weights_.size());
  device_valid_.assign(size_t(pages), 0);
  // [layers][row pages][row positions][K rows][V rows], each 256-byte aligned.
  const uint64_t ints = align_device(4 * uint64_t(weights_.size())) + 2 * align_device(4 * uint64_t(kMirrorRows));
  const uint64_t rows = uint64_t(weights_.size()) * uint64_t(kMirrorRows) * uint64_t(config_.kv_dim()) * 2;
  device_staging_ = DeviceBuffer(ints + 2 * align_device(rows), "the hybrid split's KV hand-off");
  host_staging_ = PinnedBuffer(device_staging_.size(), "the hybrid split's KV hand-off");
  auto* dev = device_staging_.as<uint8_t>();
  device_.layers = reinterpret_cast<const int32_t*>(dev);
  device_.row_page = reinterpret_cast<const int32_t*>(dev + align_device(4 * uint64_t(weights_.size())));
  device_.row_pos = device_.row_page + align_device(4 * uint64_t(kMirrorRows)) / 4;
  device_.k_staging = reinterpret_cast<uint16_t*>(dev + ints);
  device_.v_staging = device_.k_staging + align_device(rows) / 2;
}

uint16_t* HostLayers::host_row(std::vector<uint16_t>& cache, size_t index, int64_t page, int64_t pos) {
  const size_t row = size_t(page * device_.page_size + pos);
  return cache.data() + (index * size_t(pool_rows_) + row) * size_t(config_.kv_dim());
}

void HostLayers::move_rows(std::span<const std::pair<int32_t, int32_t>> rows, std::span<const int64_t> ranks, bool up,
                           cudaStream_t stream) {
  if (rows.empty() || ranks.empty()) return;
  const size_t kv_dim = size_t(config_.kv_dim()), layers = ranks.size();
  auto* dev = device_staging_.as<uint8_t>();
  auto* host = host_staging_.as<uint8_t>();
  const auto host_at = [&](const void* device_ptr) { return host + (static_cast<const uint8_t*>(device_ptr) - dev); };
  auto* layer_ids = reinterpret_cast<int32_t*>(host_at(device_.layers));
  for (size_t i = 0; i < layers; ++i) layer_ids[i] = layer_ids_[size_t(ranks[i])];
  auto* row_pages = reinterpret_cast<int32_t*>(host_at(device_.row_page));
  auto* positions = reinterpret_cast<int32_t*>(host_at(device_.row_pos));
  auto* k_rows = reinterpret_cast<uint16_t*>(host_at(device_.k_staging));
  auto* v_rows = reinterpret_cast<uint16_t*>(host_at(device_.v_staging));
  for (size_t at = 0; at < rows.size(); at += size_t(kMirrorRows)) {
    const size_t n = std::min(rows.size() - at, size_t(kMirrorRows));
    for (size_t r = 0; r < n; ++r) {
      row_pages[r] = rows[at + r].first;
      positions[r] = rows[at + r].second;
    }
    KvRowsParams p = device_;
    p.n_layers = int(layers);
    p.n_rows = int64_t(n);
    const uint64_t descriptors = uint64_t(reinterpret_cast<const uint8_t*>(device_.k_staging) - dev);
    NT_CUDA_CHECK(cudaMemcpyAsync(dev, host, descriptors, cudaMemcpyHostToDevice, stream));
    // The kernel packs the i-th moved layer's row r at i * n + r.
    const size_t used = layers * n * kv_dim * 2;
    const auto staged = [&](uint16_t* base, size_t i, size_t r) { return base + (i * n + r) * kv_dim; };
    if (up) {
      for (size_t i = 0; i < layers; ++i) {
        const size_t rank = size_t(ranks[i]);
        for (size_t r = 0; r < n; ++r) {
          std::memcpy(staged(k_rows, i, r), host_row(k_cache_, rank, row_pages[r], positions[r]), kv_dim * 2);
          std::memcpy(staged(v_rows, i, r), host_row(v_cache_, rank, row_pages[r], positions[r]), kv_dim * 2);
        }
      }
      NT_CUDA_CHECK(cudaMemcpyAsync(device_.k_staging, k_rows, used, cudaMemcpyHostToDevice, stream));
      NT_CUDA_CHECK(cudaMemcpyAsync(device_.v_staging, v_rows, used, cudaMemcpyHostToDevice, stream));
      kv_rows_from_staging(p, stream);
      NT_CUDA_CHECK(cudaStreamSynchronize(stream));  // the pinned staging is rewritten next
    } else {
      kv_rows_to_staging(p, stream);
      NT_CUDA_CHECK(cudaMemcpyAsync(k_rows, device_.k_staging, used, cudaMemcpyDeviceToHost, stream));
      NT_CUDA_CHECK(cudaMemcpyAsync(v_rows, device_.v_staging, used, cudaMemcpyDeviceToHost, stream));
      NT_CUDA_CHECK(cudaStreamSynchronize(stream));
      for (size_t i = 0; i < layers; ++i) {
        const size_t rank = size_t(ranks[i]);
        for (size_t r = 0; r < n; ++r) {
          std::memcpy(host_row(k_cache_, rank, row_pages[r], positions[r]), staged(k_rows, i, r), kv_dim * 2);
          std::memcpy(host_row(v_cache_, rank, row_pages[r], positions[r]), staged(v_rows, i, r), kv_dim * 2);
        }
      }
    }
  }
}

void HostLayers::append_page_rows(const KvPages& pages, SeqId seq, int64_t first_pos, int64_t count, std::vector<PageRows>& out) {
  const int64_t size = pages.page_size(), end = first_pos + count;
  const std::span<const int32_t> held = pages.pages(seq);
  for (int64_t i = 0; i < pages.pages_for(end); ++i) {
    const int64_t first = std::clamp<int64_t>(first_pos - i * size, 0, size);
    out.push_back({held[size_t(i)], first, std::clamp<int64_t>(end - i * size, 0, size) - first});
  }
}

void HostLayers::before_gpu_pass(std::span<const PageRows> runs, cudaStream_t stream) {
  stale_.clear();
  for (const PageRows& r : runs) {
    int64_t& valid = device_valid_[size_t(r.page)];
    for (int64_t pos = valid; pos < r.first; ++pos) stale_.emplace_back(int32_t(r.page), int32_t(pos));
    valid = std::max(valid, r.first);
  }
  move_rows(stale_, all_ranks_, true, stream);
}

void HostLayers::after_gpu_pass(std::span<const PageRows> runs, std::span<const int64_t> host_ranks, cudaStream_t stream) {
  stale_.clear();
  for (const PageRows& r : runs) {
    for (int64_t pos = r.first; pos < r.first + r.count; ++pos) stale_.emplace_back(int32_t(r.page), int32_t(pos));
    if (r.count > 0) device_valid_[size_t(r.page)] = r.first + r.count;
  }
  gpu_ranks_.clear();
  std::set_difference(all_ranks_.begin(), all_ranks_.end(), host_ranks.begin(), host_ranks.end(),
                      std::back_inserter(gpu_ranks_));
  move_rows(stale_, gpu_ranks_, false, stream);
  move_rows(stale_, host_ranks, true, stream);
}

void HostLayers::after_host_pass(std::span<const PageRows> runs) {
  for (const PageRows& r : runs) {
    if (r.count == 0) continue;
    int64_t& valid = device_valid_[size_t(r.page)];
    valid = std::min(valid, r.first);
  }
}

size_t HostLayers::saved_offset(size_t r, size_t part) const {
  const size_t row_bytes = size_t(config_.kv_dim()) * 2;
  return (r * 2 * size_t(config_.n_layers) + part) * row_bytes;
}

void HostLayers::read_saved_rows(std::span<const int64_t> rows, std::span<uint8_t> out) const {
  const size_t kv_dim = size_t(config_.kv_dim()), n_layers = size_t(config_.n_layers);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const size_t layer = size_t(layer_ids_[i]);
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t at = (i * size_t(pool_rows_) + size_t(rows[r])) * kv_dim;
      std::memcpy(&out[saved_offset(r, layer)], k_cache_.data() + at, kv_dim * 2);
      std::memcpy(&out[saved_offset(r, n_layers + layer)], v_cache_.data() + at, kv_dim * 2);
    }
  }
}

void HostLayers::write_saved_rows(std::span<const int64_t> rows, std::span<const uint8_t> in) {
  const size_t kv_dim = size_t(config_.kv_dim()), n_layers = size_t(config_.n_layers);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const size_t layer = size_t(layer_ids_[i]);
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t at = (i * size_t(pool_rows_) + size_t(rows[r])) * kv_dim;
      std::memcpy(k_cache_.data() + at, &in[saved_offset(r, layer)], kv_dim * 2);
      std::memcpy(v_cache_.data() + at, &in[saved_offset(r, n_layers + layer)], kv_dim * 2);
    }
  }
}

void HostLayers::run(int64_t layer, std::span<const SequenceRun> runs, int64_t n, const KvPages& pages,
                     const cpu::TreeRows* trees) {
  const size_t i = size_t(index_[size_t(layer)]);
  const size_t layer_elems = size_t(pool_rows_) * size_t(config_.kv_dim());
  // Every row takes the kernels of the pass's n tokens, but a stepwise run's, which take one-token steps'.
  groups_.clear();
  for (const SequenceRun& r : runs) {
    const int64_t alone = r.stepwise ? 1 : n;
    if (!groups_.empty() && groups_.back().alone == alone) {
      groups_.back().count += r.count;
    } else {
      groups_.push_back({r.first, r.count, alone});
    }
  }
  const cpu::LayerRows rows{n, runs, &pages, groups_, trees};
  layer_.run(layer_ids_[i], weights_[i], {k_cache_.data() + i * layer_elems, TensorType::F16},
             {v_cache_.data() + i * layer_elems, TensorType::F16}, rows, host_x(), pool_);
}

void HostLayers::copy_pages(std::span<const PageCopy> copies) {
  for (const PageCopy& c : copies) device_valid_[size_t(c.to)] = device_valid_[size_t(c.from)];
  const size_t layer_elems = size_t(pool_rows_) * size_t(config_.kv_dim());
  const size_t page_elems = size_t(device_.page_size) * size_t(config_.kv_dim());
  for (auto* cache : {&k_cache_, &v_cache_}) {
    for (size_t i = 0; i < weights_.size(); ++i) {
      uint16_t* base = cache->data() + i * layer_elems;
      for (const PageCopy& c : copies) {
        std::memcpy(base + size_t(c.to) * page_elems, base + size_t(c.from) * page_elems, page_elems * sizeof(uint16_t));
      }
    }
  }
}

void HostLayers::copy_rows(std::span<const RowCopy> copies) {
  const size_t kv_dim = size_t(config_.kv_dim());
  const int64_t size = device_.page_size;
  for (const RowCopy& c : copies) {
    const int64_t from_page = c.from / size, from = c.from % size, to_page = c.to / size, to = c.to % size;
    if (from >= device_valid_[size_t(from_page)]) {
      int64_t& valid = device_valid_[size_t(to_page)];
      valid = std::min(valid, to);
    }
    for (auto* cache : {&k_cache_, &v_cache_}) {
      for (size_t i = 0; i < weights_.size(); ++i) {
        std::memcpy(host_row(*cache, i, to_page, to), host_row(*cache, i, from_page, from), kv_dim * 2);
      }
    }
  }
}

}  // namespace nt
