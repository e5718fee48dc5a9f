// The layers a hybrid split gives the host: the CPU computes them with the
// CPU backend's kernels (cpu::DecoderLayer) straight from the RAM tier's pinned
// copy that streaming would otherwise move, so nothing is copied twice, with
// their K and V caches in host memory. The CUDA runner hands the hidden state
// over at each switch (host_x, pinned), and the link streams the other
// layers meanwhile.
//
// Passes too large for the CPU to pay for all of them (prefill chunks, wide
// batches) stream these layers to the GPU like the rest, or all but a share
// the host still computes, so their caches live on both sides: the host's
// holds every row, and after such a pass the rows the GPU wrote come down and
// those the host wrote go up; before one the rows the host wrote since the
// GPU last held them go up (per KV page, the GPU holds a valid prefix of its
// positions in every host layer). Decode steps move no KV.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/decoder_layer.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/kv_rows.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "runtime/kv_pages.h"
#include "storage/layer_reads.h"

namespace nt {

class HostLayers {
 public:
  // `layers`: the layer indices the host computes, each with its weights
  // rebased into `pinned[i]` (the staging layout of reads[layer]).
  // `device`: the runner's caches (layers, rows and staging unset), `pages`
  // pages of device.page_size positions each, as the host pool's pages hold.
  HostLayers(const ModelSpec& config, const ModelWeights& file_weights, std::span<const int64_t> layers,
             std::span<const uint8_t* const> pinned, std::span<const LayerRead> reads, const float* rope_freq_factors,
             int64_t pages, const KvRowsParams& device, int64_t max_rows, int threads);

  bool computes(int64_t layer) const { return layer >= 0 && layer < int64_t(index_.size()) && index_[size_t(layer)] >= 0; }
  // Its place among the host's layers (0 to count() - 1, in layer order).
  int64_t rank(int64_t layer) const { return index_[size_t(layer)]; }
  int64_t count() const { return int64_t(weights_.size()); }
  int threads() const { return pool_.size(); }
  const ModelSpec& config() const { return config_; }

  // Pinned [max_rows][dim]: the hidden state the runner copies in and back.
  float* host_x() { return x_.as<float>(); }
  float* host_x_on_device() const { return x_on_device_; }
  // Layer `layer` over the first n rows of host_x, `runs` saying whose they
  // are (in row order, covering them; a stepwise run's rows take the kernels
  // of one-token steps; `trees` their token trees' rows, when one is).
  void run(int64_t layer, std::span<const SequenceRun> runs, int64_t n, const KvPages& pages,
           const cpu::TreeRows* trees = nullptr);
  // The pool's page copies (copy-on-write of shared prefixes) in the host caches.
  void copy_pages(std::span<const PageCopy> copies);
  // Rows moved (a token tree's accepted path), in order, in the host caches;
  // the GPU's valid prefix of a page ends at the first row moved into it from
  // past its page's valid prefix.
  void copy_rows(std::span<const RowCopy> copies);

  // A pass over one page of a run's sequence: it attends to the page's
  // positions before `first` and writes `count` from there on.
  struct PageRows {
    int64_t page = 0, first = 0, count = 0;
  };
  // The pages of a run of `count` positions from `first_pos` on: every page
  // of the sequence up to its last written one.
  static void append_page_rows(const KvPages& pages, SeqId seq, int64_t first_pos, int64_t count, std::vector<PageRows>& out);
  // Before a pass in which the GPU computes some of these layers over `runs`.
  void before_gpu_pass(std::span<const PageRows> runs, cudaStream_t stream);
  // After it, once `stream` has synchronized: the rows of the layers the GPU
  // computed come down, and those of the ones the host computed (`host_ranks`,
  // ascending, a wider pass's share) go up, so both copies hold them.
  void after_gpu_pass(std::span<const PageRows> runs, std::span<const int64_t> host_ranks, cudaStream_t stream);
  // After a pass in which the host computed all of them.
  void after_host_pass(std::span<const PageRows> runs);

  // A saved sequence's pool rows (saved_kv_rows.h: per position every
  // layer's K row, then every layer's V row): the host layers' parts read
  // from its caches, which hold all their rows, or written into them (the
  // runner writes the device's copies).
  void read_saved_rows(std::span<const int64_t> rows, std::span<uint8_t> out) const;
  void write_saved_rows(std::span<const int64_t> rows, std::span<const uint8_t> in);

 private:
  // Moves the rows (page, position) of the K and V of the host layers ranked
  // `ranks` between the host caches and the device's, kMirrorRows at a time.
  void move_rows(std::span<const std::pair<int32_t, int32_t>> rows, std::span<const int64_t> ranks, bool up,
                 cudaStream_t stream);
  uint16_t* host_row(std::vector<uint16_t>& cache, size_t index, int64_t page, int64_t pos);
  // Where part `part` (K of each layer, then V of each) of saved position r lies in `bytes`.
  size_t saved_offset(size_t r, size_t part) const;

  ModelSpec config_;
  std::vector<int> index_;                   // layer -> host index, -1 for the GPU's
  std::vector<int32_t> layer_ids_;           // host index -> layer
  std::vector<int64_t> all_ranks_;           // 0 to count() - 1
  std::vector<int64_t> gpu_ranks_;           // after_gpu_pass's complement of host_ranks
  std::vector<LayerWeights> weights_;   // per host index, pointing into the pinned copies
  int64_t pool_rows_;
  std::vector<uint16_t> k_cache_, v_cache_;  // [host index][pool row][kv_dim] F16
  cpu::ThreadPool pool_;
  cpu::DecoderLayer layer_;
  std::vector<cpu::TokenGroup> groups_;  // run()'s rows by the kernels they take
  PinnedBuffer x_;
  float* x_on_device_ = nullptr;
  // The device side: the runner's caches, and the GPU's valid prefix per page.
  KvRowsParams device_;
  std::vector<int64_t> device_valid_;
  std::vector<std::pair<int32_t, int32_t>> stale_;  // rows to move, (page, position)
  DeviceBuffer device_staging_;  // layer list, row pages, row positions, K rows, V rows
  PinnedBuffer host_staging_;    // the same, as they cross
};

}  // namespace nt
