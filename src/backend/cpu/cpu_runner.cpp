#include "backend/cpu/cpu_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/decoder_layer.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/tree_rows.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/half.h"
#include "model/model_weights.h"
#include "model/rope.h"
#include "runtime/kv_window.h"
#include "storage/host_memory.h"

namespace nt {
namespace {

cpu::WeightView view(const WeightRef& w) { return {w.data, w.type, w.rows, w.cols, w.row_stride(), w.info->name}; }

// Checked before allocating: a cache past the free memory would otherwise
// fail as a bare "out of memory", or be taken and swap the machine.
void check_kv_fits(double kv_bytes, int64_t context, const CpuRunnerOptions& opt) {
  const uint64_t available = host_mem_available();
  if (kv_bytes <= double(available)) return;
  const std::string held = opt.kv_pool > 0 ? fmt::format("a pool of {} positions (--kv-pool)", opt.kv_pool)
                                           : fmt::format("{} sequence{} of {} positions", std::max<int64_t>(1, opt.sequences),
                                                         opt.sequences > 1 ? "s" : "", context);
  fail("-c {}: the KV cache for {} needs {} of host memory, but {} is available; lower -c{}{}", context, held,
       format_size(uint64_t(std::min(kv_bytes, 1.8e19))), format_size(available), opt.sequences > 1 ? " or --parallel" : "",
       opt.kv_f32 ? " or drop --kv-f32" : "");
}

class CpuRunner final : public ModelRunner {
 public:
  CpuRunner(std::shared_ptr<const GgufFile> file, const CpuRunnerOptions& opt)
      : file_(std::move(file)),
        config_(read_model_spec(file_->header(), file_->path())),
        weights_(load_model_weights(*file_, config_)),
        pool_(opt.threads),
        max_batch_(std::max<int64_t>(1, opt.max_batch)),
        kv_type_(opt.kv_f32 ? TensorType::F32 : TensorType::F16),
        layer_(config_, weights_.rope_freqs.info ? weights_.rope_freqs.f32() : nullptr, max_batch_) {
    const auto& c = config_;
    const int64_t context = opt.context > 0 ? opt.context : std::min<int64_t>(c.context_length, 4096);
    const int64_t sequences = std::max<int64_t>(1, opt.sequences);
    const int64_t pages = KvPages::pool_pages(opt.kv_pool, sequences, context, kPageSize);
    kv_window_ = plan_kv_window(c, pages, sequences, max_batch_, kPageSize, opt.swa_full);
    pool_rows_ = pages * kPageSize;
    window_rows_ = kv_window_.pages * kPageSize;
    const size_t full_elems = size_t(kv_window_.full_layers) * size_t(pool_rows_) * size_t(c.kv_dim());
    const size_t window_elems = size_t(kv_window_.window_layers) * size_t(window_rows_) * size_t(c.kv_dim());
    const size_t elem_bytes = kv_type_ == TensorType::F16 ? 2 : 4;
    check_kv_fits(2 * double(full_elems + window_elems) * double(elem_bytes), context, opt);
    init_pages(KvPages(pages, kPageSize, context), kv_window_.books(kPageSize, context, 0));
    k_cache_.resize(full_elems * elem_bytes);
    v_cache_.resize(full_elems * elem_bytes);
    k_window_.resize(window_elems * elem_bytes);
    v_window_.resize(window_elems * elem_bytes);
    const size_t n = size_t(max_batch_);
    x_.resize(n * c.dim);
    xb_.resize(n * c.dim);
    head_rows_.resize(n);
  }

  const ModelSpec& config() const override { return config_; }

  std::string description() const override {
    const std::string window =
        kv_window_.window > 0 ? fmt::format(" ({} sliding-window layers: {} positions)", kv_window_.window_layers, window_rows_) : "";
    return fmt::format("cpu ({} threads, {}, {} KV cache of {} positions{}, context {})", pool_.size(),
                       cpu::isa_name(cpu::kernels().isa), tensor_type_name(kv_type_), pool_rows_, window, context_size());
  }

  uint64_t weight_bytes_per_token() const override {
    uint64_t bytes = weights_.output.bytes() + weights_.output_norm.bytes();
    for (const auto& l : weights_.layers) bytes += l.bytes();
    return bytes;
  }

  int64_t pass_chunk_entries() const override { return max_batch_; }
  uint64_t kv_bytes_per_position() const override { return 2 * uint64_t(config_.n_layers) * row_bytes(); }

  void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                     BatchOutputs& out) override {
    // Chunks of up to max_batch entries; a sequence's run may span chunks,
    // whose later part then attends to what the earlier part cached. Each
    // run's tokens take the kernels the whole run takes alone (a
    // cpu::TokenGroup's `alone`), so the chunking changes no result.
    run_outputs_.assign(runs.size(), 0);
    for (size_t i = 0; i < runs.size(); ++i) {
      for (int64_t e = runs[i].first; e < runs[i].first + runs[i].count; ++e) {
        run_outputs_[i] += batch.entries[size_t(e)].output != Output::None ? 1 : 0;
      }
    }
    const int64_t total = int64_t(batch.size());
    size_t r = 0;
    for (int64_t at = 0; at < total; at += max_batch_) {
      const int64_t n = std::min(total - at, max_batch_);
      chunk_runs_.clear();
      run_groups_.clear();
      head_alone_.clear();
      for (; r < runs.size() && runs[r].first < at + n; ++r) {
        const int64_t first = std::max(runs[r].first, at);
        const int64_t end = std::min(runs[r].first + runs[r].count, at + n);
        chunk_runs_.push_back(
            {runs[r].seq, first - at, end - first, runs[r].pos + (first - runs[r].first), runs[r].stepwise, runs[r].tree});
        // A stepwise run takes the kernels of one token at a time.
        const bool stepwise = runs[r].stepwise;
        run_groups_.push_back({first - at, end - first, stepwise ? 1 : runs[r].count});
        head_alone_.push_back(stepwise ? 1 : run_outputs_[r]);
        if (runs[r].first + runs[r].count > at + n) break;  // continues in the next chunk
      }
      // A tree's rows may have ancestors in an earlier chunk: their paths come from the whole batch.
      const bool tree = cpu::has_tree(chunk_runs_);
      if (tree) tree_rows_.assign(batch, runs, at, n);
      claim_window(chunk_runs_);
      forward_chunk({batch.entries.data() + at, size_t(n)}, chunk_runs_, layers, tree ? &tree_rows_ : nullptr);
      hand_out(batch, at, out);
    }
  }

  // Every pass, the single-sequence methods' included, is a forward_pages.
  bool honours_default_schedule() const override { return true; }
  bool reports_layers() const override { return true; }

  void copy_pages(std::span<const PageCopy> copies) override {
    const size_t page_bytes = size_t(kPageSize) * row_bytes();
    for_each_layer_cache([&](uint8_t* base, KvBook book) {
      for (const PageCopy& c : copies) {
        if (c.book == book) std::memcpy(base + size_t(c.to) * page_bytes, base + size_t(c.from) * page_bytes, page_bytes);
      }
    });
  }

  void copy_rows(std::span<const RowCopy> copies) override {
    const size_t bytes = row_bytes();
    for_each_layer_cache([&](uint8_t* base, KvBook book) {
      for (const RowCopy& c : copies) {
        if (c.book == book) std::memcpy(base + size_t(c.to) * bytes, base + size_t(c.from) * bytes, bytes);
      }
    });
  }

  // A window pool holds too little to save: a saved state then holds the tokens, decoded again on load.
  bool saves_kv_rows() const override { return kv_window_.window == 0; }

  // A position's bytes: every layer's K row, then every layer's V row.
  void read_rows(std::span<const int64_t> rows, std::span<uint8_t> out) const override {
    const size_t bytes = row_bytes();
    size_t part = 0;
    for (const bool keys : {true, false}) {
      for (int64_t l = 0; l < config_.n_layers; ++l, ++part) {
        const uint8_t* base = layer_base(*this, keys, l);
        for (size_t r = 0; r < rows.size(); ++r) {
          std::memcpy(&out[(r * 2 * size_t(config_.n_layers) + part) * bytes], base + size_t(rows[r]) * bytes, bytes);
        }
      }
    }
  }

  void write_rows(std::span<const int64_t> rows, std::span<const uint8_t> in) override {
    const size_t bytes = row_bytes();
    size_t part = 0;
    for_each_layer_cache([&](uint8_t* base, KvBook) {  // no window book: saved rows are whole
      for (size_t r = 0; r < rows.size(); ++r) {
        std::memcpy(base + size_t(rows[r]) * bytes, &in[(r * 2 * size_t(config_.n_layers) + part) * bytes], bytes);
      }
      ++part;
    });
  }

 private:
  static constexpr int64_t kPageSize = 32;

  // One pass of n <= max_batch entries (`runs` index into them, run_groups_
  // groups them for the kernels): every weight matrix is read once for all.
  void forward_chunk(std::span<const BatchEntry> entries, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                     const cpu::TreeRows* tree) {
    const auto& c = config_;
    const int64_t n = int64_t(entries.size());
    // Embedding lookup, decoded from the table's format.
    for (int64_t t = 0; t < n; ++t) cpu::embedding_row(view(weights_.token_embd), entries[size_t(t)].token, &x_[size_t(t * c.dim)]);
    if (c.embedding_scale != 1.0f) {
      for (size_t i = 0; i < size_t(n * c.dim); ++i) x_[i] *= c.embedding_scale;
    }
    LayerObserver* observer = layer_observer();
    const size_t values = size_t(n * c.dim);
    const cpu::LayerRows full_rows{n, runs, &kv_pages(), run_groups_, tree};
    const cpu::LayerRows window_rows{n, runs, window_pages(), run_groups_, tree};
    for (const int32_t l : layers) {
      if (observer) layer_input_.assign(x_.begin(), x_.begin() + ptrdiff_t(values));
      const cpu::LayerRows& rows = kv_window_.windowed[size_t(l)] ? window_rows : full_rows;
      layer_.run(l, weights_.layers[size_t(l)], layer_cache(true, l), layer_cache(false, l), rows, x_.data(), pool_);
      if (!observer) continue;
      observer->observe(l, layer_input_, {x_.data(), values});
      if (const LayerSpec& spec = c.layers[size_t(l)]; spec.has_experts()) {
        observer->observe_experts(l, layer_.chosen_experts(l, n), spec.moe.n_experts_used);
      }
    }
  }

  // Final norm and output head for the chunk's entries (from `at` on) that
  // want an output (grouped by run), then each entry's output from its row
  // of logits.
  void hand_out(const Batch& batch, int64_t at, BatchOutputs& out) {
    const auto& c = config_;
    int64_t rows = 0;
    head_groups_.clear();
    for (size_t i = 0; i < chunk_runs_.size(); ++i) {
      const SequenceRun& run = chunk_runs_[i];
      const int64_t first = rows;
      for (int64_t t = run.first; t < run.first + run.count; ++t) {
        if (batch.entries[size_t(at + t)].output == Output::None) continue;
        cpu::rmsnorm(&x_[size_t(t * c.dim)], weights_.output_norm.f32(), &xb_[size_t(rows * c.dim)], c.dim, c.rms_eps);
        head_rows_[size_t(rows++)] = at + t;
      }
      head_groups_.push_back({first, rows - first, head_alone_[i]});
    }
    if (rows == 0) return;
    head_logits_.resize(size_t(rows) * size_t(c.vocab_size));
    cpu::matmul_groups(view(weights_.output), xb_.data(), head_logits_.data(), head_groups_, pool_);
    if (c.final_logit_softcap > 0.0f) {
      const float cap = c.final_logit_softcap;
      for (float& logit : head_logits_) logit = cap * std::tanh(logit / cap);
    }
    for (int64_t i = 0; i < rows; ++i) {
      const size_t entry = size_t(head_rows_[size_t(i)]);
      const std::span<const float> row{head_logits_.data() + size_t(i) * size_t(c.vocab_size), size_t(c.vocab_size)};
      const size_t slot = size_t(out.index[entry]);
      switch (batch.entries[entry].output) {
        case Output::Logits: std::copy(row.begin(), row.end(), out.logits.begin() + ptrdiff_t(slot * row.size())); break;
        case Output::Argmax: out.argmax[slot] = argmax_first(row); break;
        case Output::Top:
          top_.assign(row, batch.top_k);
          out.top[slot].assign(top_.view().begin(), top_.view().end());
          break;
        case Output::None: break;
      }
    }
  }

  size_t row_bytes() const { return size_t(config_.kv_dim()) * (kv_type_ == TensorType::F16 ? 2 : 4); }

  // Calls f with the base of every layer's K cache, then every layer's V
  // cache, and the book that layer's rows follow.
  template <class F>
  void for_each_layer_cache(F f) {
    for (const bool keys : {true, false}) {
      for (int64_t l = 0; l < config_.n_layers; ++l) {
        f(static_cast<uint8_t*>(layer_cache(keys, l).data), kv_window_.windowed[size_t(l)] ? KvBook::Window : KvBook::Full);
      }
    }
  }

  // Layer l's K (or V) cache holds [pool row][kv_dim] in kv_type_, in the
  // window pool for a sliding-window layer that has one.
  cpu::LayerCache layer_cache(bool keys, int64_t layer) { return {layer_base(*this, keys, layer), kv_type_}; }
  template <class Self>  // CpuRunner or const CpuRunner
  static std::conditional_t<std::is_const_v<Self>, const uint8_t*, uint8_t*> layer_base(Self& self, bool keys, int64_t layer) {
    const bool windowed = self.kv_window_.windowed[size_t(layer)];
    auto& cache = windowed ? (keys ? self.k_window_ : self.v_window_) : (keys ? self.k_cache_ : self.v_cache_);
    const size_t layer_bytes = size_t(windowed ? self.window_rows_ : self.pool_rows_) * self.row_bytes();
    return cache.data() + size_t(self.kv_window_.index[size_t(layer)]) * layer_bytes;
  }

  std::shared_ptr<const GgufFile> file_;
  ModelSpec config_;
  ModelWeights weights_;
  mutable cpu::ThreadPool pool_;
  int64_t max_batch_;
  TensorType kv_type_;
  int64_t pool_rows_ = 0;                   // positions the KV pool holds, over all sequences
  std::vector<uint8_t> k_cache_, v_cache_;  // [full-attention layer][pool row][kv_dim] in kv_type_
  KvWindowPlan kv_window_;                   // which layers keep only their window, in a pool of its own
  int64_t window_rows_ = 0;
  std::vector<uint8_t> k_window_, v_window_;  // [sliding-window layer][window pool row][kv_dim]
  cpu::DecoderLayer layer_;                   // every layer's pass, with its scratch
  std::vector<float> x_;            // residual stream [n][dim]
  std::vector<float> layer_input_;  // x_ before the layer, for a LayerObserver
  std::vector<float> xb_;           // the head's normed rows [n][dim]
  std::vector<int64_t> head_rows_;  // entries whose rows go through the head
  std::vector<float> head_logits_;  // [output rows][vocab]
  Candidates top_;
  std::vector<SequenceRun> chunk_runs_;
  cpu::TreeRows tree_rows_;  // the chunk's token-tree rows, when it holds a tree
  std::vector<int64_t> run_outputs_;  // per run of the batch: its entries that want an output
  std::vector<cpu::TokenGroup> run_groups_, head_groups_;  // the chunk's runs, and their rows through the head
  std::vector<int64_t> head_alone_;  // per chunk run: the whole run's rows through the head
};

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(std::shared_ptr<const GgufFile> file, const CpuRunnerOptions& options) {
  return std::make_unique<CpuRunner>(std::move(file), options);
}

}  // namespace nt
