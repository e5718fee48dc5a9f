// What the engine needs from a backend: forward passes over a paged KV pool
// shared by many sequences. A pass takes a Batch (runtime/batch.h) of
// {token, position, sequence, output} entries and a LayerSchedule: the one
// pass a backend implements (forward_pages). Sequence memory (allocate,
// free, truncate, copy a prefix) is kept here, over the backend's pool. The
// single-sequence methods work on the default sequence (id 0, always
// allocated) as passes of one run; a backend serves those on the paths it
// makes fastest for one conversation (graph-captured steps), and decode()'s
// steps too (run-ahead, on-device sampling).
// The CPU and CUDA backends implement it; generation, batching, chat,
// perplexity and benchmarks are written once against it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch/model_spec.h"
#include "runtime/batch.h"
#include "runtime/kv_pages.h"
#include "runtime/layer_schedule.h"
#include "sampling/candidates.h"
#include "sampling/step_policy.h"

namespace nt {

// Sees the residual stream around each layer a pass runs: what layer-skip
// calibration measures.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  // Layer `layer`'s input and output for some consecutive entries of the
  // pass (a backend may hand a batch over in chunks): [rows][dim] each.
  virtual void observe(int32_t layer, std::span<const float> input, std::span<const float> output) = 0;
  // A mixture-of-experts layer's routing for the same entries: each row's k
  // chosen experts, [rows][k]. What expert calibration counts.
  virtual void observe_experts(int32_t /*layer*/, std::span<const int32_t> /*chosen*/, int64_t /*k*/) {}
};

// A mixture of experts' expert reads since load, where a runner caches its
// experts: the uses (one token's choice of one expert in one layer), those
// VRAM served, and the bytes copied in for the rest.
struct ExpertTraffic {
  uint64_t uses = 0, in_vram = 0, on_cpu = 0, copied_bytes = 0;  // on_cpu: misses the CPU computed in place of a copy
};

// A layer in a pass: computed by the GPU from VRAM, or from weights streamed
// to it from pinned host RAM or from storage; or computed by the CPU from host memory.
enum class LayerPlace { Vram, Ram, Disk, Cpu };
std::string_view layer_place_name(LayerPlace place);  // "vram", "ram", "disk", "cpu"

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelSpec& config() const = 0;
  // Positions one sequence holds at most.
  int64_t context_size() const { return pages_->max_length(); }
  // Backend and placement, for logs: "cpu (2 threads, avx2)".
  virtual std::string description() const = 0;
  // Bytes of weights read per decoded token (for GB/s reports).
  virtual uint64_t weight_bytes_per_token() const = 0;
  // Bytes of one cached position's keys and values over all layers: a decode
  // step reads this much per visible key on top of the weights.
  virtual uint64_t kv_bytes_per_position() const = 0;
  // The layers a pass computes without moving their weights first: all of
  // them unless the runner streams some (then its VRAM-resident ones).
  virtual std::vector<int32_t> resident_layers() const;
  // Where each layer's weights come from in a pass and what computes it, in
  // layer order: the CPU's (every layer on the CPU) unless a GPU runner says otherwise.
  virtual std::vector<LayerPlace> layer_places() const;
  // All zero unless the runner caches a mixture of experts' experts.
  virtual ExpertTraffic expert_traffic() const { return {}; }

  // --- Many sequences ---
  // Whether a token tree of `tokens` entries (the pending token and its
  // nodes) verified from position `pos` on gets, along every path, the
  // numbers of plain one-token steps, as a chain always does. Where it would
  // not (tree kernels that cannot follow a path there), speculation drafts
  // chains instead, so greedy output stays plain greedy decoding's.
  virtual bool verifies_trees_exactly(int64_t pos, int64_t tokens) const {
    (void)pos;
    (void)tokens;
    return true;
  }

  // Entries a pass computes at a time: a longer batch runs in chunks of this
  // many, in entry order. A prompt chunk's numbers can depend on the chunk's
  // size, so a sequence gets the numbers of its prefill alone only from
  // chunks cut where alone cuts them (BatchScheduler's batch_invariant mode).
  virtual int64_t pass_chunk_entries() const { return std::numeric_limits<int64_t>::max(); }

  // Runs one pass of the batch over the scheduled layers and hands back what
  // each entry asked for. Each sequence's run continues it (from at most its
  // length; later positions are overwritten) and must fit the context and
  // the pool (nt::Error naming the sequence otherwise; the batch's sequences
  // then end at their first entry's position). Token ids are checked.
  void forward(const Batch& batch, BatchOutputs& out, const LayerSchedule& schedule);
  // The same over the default schedule (set_default_schedule; every layer unless set).
  void forward(const Batch& batch, BatchOutputs& out) { forward(batch, out, default_schedule_); }
  // forward(batch, out, schedule), handing each scheduled layer's input and
  // output to `observer`; nt::Error on a backend that cannot.
  void forward_observed(const Batch& batch, BatchOutputs& out, const LayerSchedule& schedule, LayerObserver& observer);

  // The schedule of every pass that names none, the single-sequence methods'
  // included: layer skip. nt::Error on a backend whose single-sequence paths
  // would not honour it.
  void set_default_schedule(LayerSchedule schedule);

  SeqId seq_alloc();
  void seq_free(SeqId seq);  // not the default sequence
  void seq_truncate(SeqId seq, int64_t length);
  // dst (emptied first) holds the first n positions of src: a shared system prompt.
  void seq_copy_prefix(SeqId src, SeqId dst, int64_t n);
  // Keeps a token tree's accepted path: the cached positions `kept`
  // (increasing, kept[i] at least start + i) move to start, start + 1, ...
  // and the sequence ends after them. Nothing is recomputed: their keys were
  // rotated for the positions they move to.
  void seq_keep(SeqId seq, int64_t start, std::span<const int64_t> kept);
  int64_t seq_length(SeqId seq) const { return pages_->length(seq); }
  // Whether a pass may continue seq from position n (n <= its length): false
  // only where the sliding-window layers released positions it would see.
  bool seq_resumable(SeqId seq, int64_t n) const { return !window_pages_ || window_pages_->resumable(seq, n); }
  // How much of a cached prefix of n positions a pass can continue: n, or 0
  // where the window released what it would see.
  int64_t seq_reusable(SeqId seq, int64_t n) const { return seq_resumable(seq, n) ? n : 0; }
  // The first position whose keys and values every layer holds: 0, or the
  // first the sliding-window layers kept.
  int64_t seq_first_held(SeqId seq) const { return window_pages_ ? window_pages_->first_held(seq) : 0; }
  // The books of every layer's cache, or of the full-attention layers' where
  // the backend keeps the sliding-window layers' apart (window_pages()).
  const KvPages& kv_pages() const { return *pages_; }
  // The sliding-window layers' books, holding about a window of each
  // sequence (KvPages with a window); null when those layers use kv_pages().
  const KvPages* window_pages() const { return window_pages_ ? &*window_pages_ : nullptr; }
  // A sequence's cache as bytes (kv_bytes_per_position() per position, in
  // position order, in the backend's own layout and KV type): what a saved
  // sequence state holds, so that loading it needs no pass. Backends that
  // cannot read their cache rows back (saves_kv_rows() false) throw nt::Error.
  virtual bool saves_kv_rows() const { return false; }
  std::vector<uint8_t> seq_save_rows(SeqId seq) const;
  // Makes seq (emptied first) hold `length` positions from seq_save_rows bytes.
  void seq_load_rows(SeqId seq, int64_t length, std::span<const uint8_t> bytes);

  // --- The default sequence ---
  // Each of these passes is one forward(Batch) of one run of sequence 0; a
  // backend serves such a pass on a path of its own where it has one (the
  // CUDA runner's captured step graphs).
  // Runs `tokens` at positions pos, pos+1, ... (overwriting any cached
  // positions from `pos` on). Writes vocab_size logits per token into `logits`
  // when all_logits, else only the last token's (none when logits is null).
  // Throws nt::Error when pos + tokens.size() exceeds context_size().
  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits);

  // Runs `tokens` like forward() and returns the token with the highest logit
  // after the last one (argmax_first of its logits): greedy decoding. A
  // backend may pick it where the logits are instead of copying them out.
  int32_t forward_greedy(std::span<const int32_t> tokens, int64_t pos);

  // Multi-step decoding: runs `token` at `pos`, hands the token `policy`
  // picks from its logits to on_token, runs that pick at pos + 1, and so on,
  // until on_token returns false or max_steps picks are handed over; returns
  // how many were. Every step's position must fit the context (nt::Error
  // otherwise). A backend may run a few steps ahead of on_token; their cache
  // positions are past the last pick and the next forward() from there
  // overwrites them, and a sampling policy's draws are then taken for them
  // too. This default steps forward_greedy, or forward_top and the policy's
  // chooser.
  virtual int64_t decode(int32_t token, int64_t pos, int64_t max_steps, const StepPolicy& policy,
                         const std::function<bool(int32_t)>& on_token);
  // decode() picking each step's argmax: greedy decoding.
  int64_t decode_greedy(int32_t token, int64_t pos, int64_t max_steps, const std::function<bool(int32_t)>& on_token) {
    return decode(token, pos, max_steps, StepPolicy{}, on_token);
  }

  // Runs `tokens` like forward() and returns in `top` the `keep` (0 < keep <
  // vocab_size) highest logits after the last one, highest first, equal
  // logits lowest id first: what Candidates::assign(row, keep) keeps, with its
  // errors for a NaN or +inf logit. For sampling (Sampler::sample_top): a
  // backend may select them where the logits are.
  void forward_top(std::span<const int32_t> tokens, int64_t pos, int64_t keep, std::vector<Candidate>& top);

 protected:
  // The backend's constructor hands over the books of its pool, and those of
  // its sliding-window layers' pool when it keeps one; the default sequence
  // is allocated here. A backend with a window book claims each pass chunk's
  // positions in it (claim_window) before computing the chunk, so that the
  // book holds a window and a chunk of each sequence, never a whole prompt.
  void init_pages(KvPages pages, std::optional<KvPages> window_pages = std::nullopt);
  // Makes room in the window book (if any) for each run's positions of a
  // pass chunk about to be computed, and copies the pages that need it.
  void claim_window(std::span<const SequenceRun> chunk_runs);
  // The same for the entries [at, at + n) of a pass's runs.
  void claim_window(std::span<const SequenceRun> runs, int64_t at, int64_t n);
  // Whether every pass goes through forward_pages with the caller's schedule
  // (decode() included: the backend does not override it).
  virtual bool honours_default_schedule() const { return false; }
  // Called when set_default_schedule changes it, with its layers in order.
  virtual void default_schedule_changed(std::span<const int32_t> layers) { (void)layers; }
  // Whether forward_pages reports each layer to layer_observer() when one is set.
  virtual bool reports_layers() const { return false; }
  LayerObserver* layer_observer() const { return observer_; }
  // One pass over a checked batch whose sequences' pages are in place.
  virtual void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                             BatchOutputs& out) = 0;
  // Copies every layer's K and V of each `from` page to its `to` page (in
  // the copy's book: the full-attention or the sliding-window layers).
  virtual void copy_pages(std::span<const PageCopy> copies) = 0;
  // Copies every layer's K and V of each `from` row to its `to` row, one
  // copy after the other (a later copy may read what an earlier one wrote).
  virtual void copy_rows(std::span<const RowCopy> copies) = 0;
  // Every layer's K and V of the physical rows `rows` to or from
  // kv_bytes_per_position() bytes each, in order (saves_kv_rows() backends).
  virtual void read_rows(std::span<const int64_t> rows, std::span<uint8_t> out) const;
  virtual void write_rows(std::span<const int64_t> rows, std::span<const uint8_t> in);
  // Records that a single-sequence method writes positions [pos, pos + count)
  // of the default sequence (nt::Error on a context overflow, nothing written).
  void claim_default(int64_t pos, int64_t count);
  // After a run-ahead: the default sequence holds `length` positions.
  void settle_default(int64_t length) { seq_truncate(0, length); }

 private:
  std::optional<KvPages> pages_, window_pages_;
  LayerSchedule default_schedule_;
  LayerObserver* observer_ = nullptr;  // set during forward_observed only
  Batch one_batch_;  // the single-sequence defaults' batch and outputs
  BatchOutputs one_out_;
  std::vector<Candidate> step_top_;  // the default decode's, sampling
};

// The first index of the largest value; NaN never wins, and 0 when nothing beats -inf.
int32_t argmax_first(std::span<const float> row);

}  // namespace nt
