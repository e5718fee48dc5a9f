#include "runtime/model_runner.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace nt {

int32_t argmax_first(std::span<const float> row) {
  float best = -INFINITY;
  size_t index = 0;  // also the answer when no value beats -inf
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] > best) {
      best = row[i];
      index = i;
    }
  }
  return int32_t(index);
}

std::vector<int32_t> ModelRunner::resident_layers() const {
  std::vector<int32_t> layers(size_t(config().n_layers));
  std::iota(layers.begin(), layers.end(), 0);
  return layers;
}

std::string_view layer_place_name(LayerPlace place) {
  switch (place) {
    case LayerPlace::Vram: return "vram";
    case LayerPlace::Ram: return "ram";
    case LayerPlace::Disk: return "disk";
    case LayerPlace::Cpu: return "cpu";
  }
  return "?";
}

std::vector<LayerPlace> ModelRunner::layer_places() const {
  return std::vector<LayerPlace>(size_t(config().n_layers), LayerPlace::Cpu);
}

void ModelRunner::init_pages(KvPages pages, std::optional<KvPages> window_pages) {
  pages_.emplace(std::move(pages));
  window_pages_ = std::move(window_pages);
  seq_alloc();  // the default sequence, id 0
}

SeqId ModelRunner::seq_alloc() {
  const SeqId seq = pages_->allocate();
  if (window_pages_) {
    try {
      const SeqId same = window_pages_->allocate();  // the books allocate and free in step
      if (same != seq) fail("KV books out of step: sequence {} is {} in the sliding-window layers' books", seq, same);
    } catch (...) {
      pages_->free(seq);
      throw;
    }
  }
  return seq;
}

void ModelRunner::seq_free(SeqId seq) {
  if (seq == 0) fail("sequence 0 is the default sequence and stays allocated (truncate it instead)");
  pages_->free(seq);
  if (window_pages_) window_pages_->free(seq);
}

void ModelRunner::seq_truncate(SeqId seq, int64_t length) {
  pages_->truncate(seq, length);
  if (window_pages_) window_pages_->truncate(seq, length);
}

void ModelRunner::seq_copy_prefix(SeqId src, SeqId dst, int64_t n) {
  std::vector<PageCopy> copies = pages_->copy_prefix(src, dst, n);
  if (window_pages_) {
    for (PageCopy c : window_pages_->copy_prefix(src, dst, n)) copies.push_back({c.from, c.to, KvBook::Window});
  }
  if (!copies.empty()) copy_pages(copies);
}

void ModelRunner::claim_window(std::span<const SequenceRun> chunk_runs) {
  if (!window_pages_) return;
  std::vector<PageCopy> copies;
  for (const SequenceRun& r : chunk_runs) {
    for (PageCopy c : window_pages_->write(r.seq, r.pos, r.pos + r.count)) copies.push_back({c.from, c.to, KvBook::Window});
  }
  if (!copies.empty()) copy_pages(copies);
}

void ModelRunner::claim_window(std::span<const SequenceRun> runs, int64_t at, int64_t n) {
  if (!window_pages_) return;
  std::vector<SequenceRun> chunk;
  for (const SequenceRun& r : runs) {
    const int64_t first = std::max(r.first, at), end = std::min(r.first + r.count, at + n);
    if (first < end) chunk.push_back({r.seq, first, end - first, r.pos + (first - r.first), r.stepwise, r.tree});
  }
  claim_window(chunk);
}

void ModelRunner::seq_keep(SeqId seq, int64_t start, std::span<const int64_t> kept) {
  const int64_t length = pages_->length(seq);
  std::vector<RowCopy> copies;
  for (size_t i = 0; i < kept.size(); ++i) {
    const int64_t to = start + int64_t(i);
    if (kept[i] < to || kept[i] >= length || (i > 0 && kept[i] <= kept[i - 1])) {
      fail("sequence {} holds {} positions: cannot keep position {} at {} (kept positions increase, each at or after "
           "its place)",
           seq, length, kept[i], to);
    }
    if (kept[i] == to) continue;
    for (const auto& [book, kind] : {std::pair{&kv_pages(), KvBook::Full}, std::pair{window_pages(), KvBook::Window}}) {
      if (!book) continue;
      if (book->shared(seq, to)) {
        fail("sequence {}: position {} is shared with another sequence; keep only rows the sequence wrote itself", seq, to);
      }
      copies.push_back({book->slot(seq, kept[i]), book->slot(seq, to), kind});
    }
  }
  if (!copies.empty()) copy_rows(copies);
  seq_truncate(seq, start + int64_t(kept.size()));
}

// A saved state holds every position of every layer; a window book has released most of its layers' positions.
static void check_rows_whole(const ModelRunner& runner) {
  if (runner.window_pages()) {
    fail("{}: a sequence's KV rows are saved whole, but the sliding-window layers keep only their last {} positions "
         "(load the model with --swa-full to keep them all)",
         runner.description(), runner.window_pages()->window());
  }
}

std::vector<uint8_t> ModelRunner::seq_save_rows(SeqId seq) const {
  check_rows_whole(*this);
  if (!saves_kv_rows()) fail("{}: this backend cannot read its KV cache rows back", description());
  std::vector<int64_t> rows(static_cast<size_t>(pages_->length(seq)));
  for (size_t p = 0; p < rows.size(); ++p) rows[p] = pages_->slot(seq, int64_t(p));
  std::vector<uint8_t> bytes(rows.size() * kv_bytes_per_position());
  read_rows(rows, bytes);
  return bytes;
}

void ModelRunner::seq_load_rows(SeqId seq, int64_t length, std::span<const uint8_t> bytes) {
  check_rows_whole(*this);
  if (!saves_kv_rows()) fail("{}: this backend cannot write KV cache rows", description());
  if (length < 0 || bytes.size() != uint64_t(length) * kv_bytes_per_position()) {
    fail("sequence {}: {} bytes of KV rows are not {} positions of {} bytes", seq, bytes.size(), length,
         kv_bytes_per_position());
  }
  pages_->truncate(seq, 0);
  pages_->write(seq, 0, length);  // fresh pages: an emptied sequence shares none to copy
  std::vector<int64_t> rows(static_cast<size_t>(length));
  for (size_t p = 0; p < rows.size(); ++p) rows[p] = pages_->slot(seq, int64_t(p));
  write_rows(rows, bytes);
}

void ModelRunner::read_rows(std::span<const int64_t>, std::span<uint8_t>) const {
  fail("{}: this backend cannot read its KV cache rows back", description());
}

void ModelRunner::write_rows(std::span<const int64_t>, std::span<const uint8_t>) {
  fail("{}: this backend cannot write KV cache rows", description());
}

void ModelRunner::forward(const Batch& batch, BatchOutputs& out, const LayerSchedule& schedule) {
  const std::vector<SequenceRun> runs = sequence_runs(batch);
  const std::vector<int32_t> layers = scheduled_layers(schedule, config().n_layers);
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const int32_t t = batch.entries[i].token;
    if (t < 0 || t >= config().vocab_size) {
      fail("batch entry {}: token id {} is outside the vocabulary of {} tokens", i, t, config().vocab_size);
    }
  }
  out.prepare(batch, config().vocab_size);
  // Make room for every run before anything runs; on an error the runs
  // written so far end where the batch started them.
  std::vector<PageCopy> copies;
  for (size_t r = 0; r < runs.size(); ++r) {
    try {
      const auto c = pages_->write(runs[r].seq, runs[r].pos, runs[r].pos + runs[r].count);
      copies.insert(copies.end(), c.begin(), c.end());
    } catch (...) {
      for (size_t back = 0; back < r; ++back) seq_truncate(runs[back].seq, runs[back].pos);
      throw;
    }
  }
  if (!copies.empty()) copy_pages(copies);
  if (batch.empty()) return;
  try {
    forward_pages(batch, runs, layers, out);
  } catch (...) {  // what the failed pass had claimed holds nothing computed
    for (const SequenceRun& r : runs) seq_truncate(r.seq, r.pos);
    throw;
  }
}

void ModelRunner::forward_observed(const Batch& batch, BatchOutputs& out, const LayerSchedule& schedule,
                                   LayerObserver& observer) {
  if (!reports_layers()) fail("{}: per-layer hidden states are not supported by this backend yet (use --device cpu)", description());
  struct Reset {
    LayerObserver*& observer;
    ~Reset() { observer = nullptr; }
  } reset{observer_};
  observer_ = &observer;
  forward(batch, out, schedule);
}

void ModelRunner::set_default_schedule(LayerSchedule schedule) {
  if (!schedule.runs_all() && !honours_default_schedule()) {
    fail("{}: layer skip is not supported by this backend yet (use --device cpu)", description());
  }
  const std::vector<int32_t> layers = scheduled_layers(schedule, config().n_layers);  // checked now, not at the first pass
  default_schedule_ = std::move(schedule);
  default_schedule_changed(layers);
}

void ModelRunner::claim_default(int64_t pos, int64_t count) {
  if (pos < 0 || count < 0 || pos + count > context_size()) {
    fail("context overflow: positions {}..{} do not fit the context of {} tokens (raise -c, up to the model's {})", pos,
         pos + count - 1, context_size(), config().context_length);
  }
  const auto copies = pages_->write(0, std::min(pos, pages_->length(0)), pos + count);
  if (!copies.empty()) copy_pages(copies);
}

void ModelRunner::forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) {
  claim_default(pos, int64_t(tokens.size()));
  one_batch_.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool last = i + 1 == tokens.size();
    one_batch_.add(tokens[i], pos + int64_t(i), 0, all_logits || (last && logits) ? Output::Logits : Output::None);
  }
  forward(one_batch_, one_out_);
  if (logits) std::copy(one_out_.logits.begin(), one_out_.logits.end(), logits);
}

int32_t ModelRunner::forward_greedy(std::span<const int32_t> tokens, int64_t pos) {
  claim_default(pos, int64_t(tokens.size()));
  one_batch_.clear();
  one_batch_.add_run(tokens, pos, 0, Output::Argmax);
  forward(one_batch_, one_out_);
  return one_out_.argmax.at(0);
}

void ModelRunner::forward_top(std::span<const int32_t> tokens, int64_t pos, int64_t keep, std::vector<Candidate>& top) {
  claim_default(pos, int64_t(tokens.size()));
  one_batch_.clear();
  one_batch_.add_run(tokens, pos, 0, Output::Top);
  one_batch_.top_k = keep;
  forward(one_batch_, one_out_);
  top = std::move(one_out_.top.at(0));
}

int64_t ModelRunner::decode(int32_t token, int64_t pos, int64_t max_steps, const StepPolicy& policy,
                            const std::function<bool(int32_t)>& on_token) {
  if (!policy.argmax() && !policy.choose) fail("decode: a sampling step policy needs its chooser");
  if (pos < 0 || max_steps < 0 || pos + max_steps > context_size()) {
    fail("context overflow: {} {} steps from position {} do not fit the KV cache of {} tokens", max_steps,
         policy.argmax() ? "greedy" : "sampled", pos, context_size());
  }
  for (int64_t step = 0; step < max_steps; ++step) {
    if (policy.argmax()) {
      token = forward_greedy({&token, 1}, pos + step);
    } else {
      forward_top({&token, 1}, pos + step, policy.top_k, step_top_);
      token = policy.choose(step_top_);
    }
    if (!on_token(token)) return step + 1;
  }
  return max_steps;
}

}  // namespace nt
