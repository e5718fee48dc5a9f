#include "engine/batch_scheduler.h"

#include <algorithm>
#include <span>
#include <utility>

#include "core/error.h"

namespace nt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// How many of a prompt's `remaining` tokens go in a pass with `budget` prompt
// tokens left; 0: it waits for the next pass. A cut leaves at least
// kMinPromptChunk tokens on either side.
int64_t prompt_chunk(int64_t remaining, int64_t budget) {
  if (remaining <= budget) return remaining;
  const int64_t n = std::min(budget, remaining - kMinPromptChunk);
  return n >= kMinPromptChunk ? n : 0;
}

// How much of `prompt` may come from a cache that holds `cached`: their
// common prefix, less the prompt's last kMinPromptChunk tokens, which are
// evaluated so that its pick comes from a chunk of the kernels the prompt
// takes alone; 0 below kMinPromptChunk.
int64_t reusable_prefix(std::span<const int32_t> prompt, std::span<const int32_t> cached) {
  const size_t n = std::min(prompt.size(), cached.size());
  const int64_t common = std::mismatch(prompt.begin(), prompt.begin() + ptrdiff_t(n), cached.begin()).first - prompt.begin();
  const int64_t length = std::min(common, int64_t(prompt.size()) - kMinPromptChunk);
  return length >= kMinPromptChunk ? length : 0;
}

}  // namespace

BatchScheduler::BatchScheduler(ModelRunner& runner, const Tokenizer& tokenizer, SchedulerOptions options,
                               SchedulerCallbacks callbacks)
    : runner_(runner),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      verifier_(runner.config().vocab_size) {
  if (options_.parallel < 1) fail("{} parallel sequences: at least 1", options_.parallel);
  if (options_.draft) check_draft_shape(options_.draft_max, options_.draft_tree);
  if (options_.prompt_budget < 2 * kMinPromptChunk) {
    fail("a prompt budget of {} tokens per pass: at least {}", options_.prompt_budget, 2 * kMinPromptChunk);
  }
  runner_.seq_truncate(0, 0);
  slots_.push_back({0, 0, false, {}});
  try {
    while (int(slots_.size()) < options_.parallel) slots_.push_back({runner_.seq_alloc(), 0, false, {}});
  } catch (const Error& e) {
    for (size_t i = 1; i < slots_.size(); ++i) runner_.seq_free(slots_[i].seq);
    fail("{} parallel sequences do not fit the runner ({}); open the model for that many sequences", options_.parallel,
         e.what());
  }
  const KvPages& pages = runner_.kv_pages();
  capacity_ = pages.page_count();
  for (Slot& s : slots_) {
    s.empty_pages = int64_t(pages.pages(s.seq).size());
    capacity_ -= s.empty_pages;
  }
}

BatchScheduler::~BatchScheduler() {
  for (const Slot& s : slots_) {
    if (s.seq == 0) {
      runner_.seq_truncate(0, 0);
    } else {
      runner_.seq_free(s.seq);
    }
  }
}

size_t BatchScheduler::submit(GenerationRequest request) {
  Record& r = records_.emplace_back();
  r.request = std::move(request);
  r.result.prompt_tokens = int64_t(r.request.prompt.size());
  r.result.error = check(r.request);
  const size_t id = first_held_ + records_.size() - 1;
  waiting_.push_back(id);
  ++progress_.requests;
  return id;
}

BatchScheduler::Record& BatchScheduler::record(size_t request) {
  return const_cast<Record&>(std::as_const(*this).record(request));
}

const BatchScheduler::Record& BatchScheduler::record(size_t request) const {
  if (request < first_held_ || request - first_held_ >= records_.size() || records_[request - first_held_].released) {
    fail("batch request {}: {}", request, request < first_held_ + records_.size() ? "released" : "never submitted");
  }
  return records_[request - first_held_];
}

std::string BatchScheduler::check(const GenerationRequest& request) const {
  const int64_t n = int64_t(request.prompt.size());
  if (n == 0) return "empty prompt: nothing to condition generation on";
  if (n > runner_.context_size()) {
    return fmt::format("the prompt has {} tokens but the context holds {} (raise -c, up to the model's {})", n,
                       runner_.context_size(), runner_.config().context_length);
  }
  const int64_t vocab = runner_.config().vocab_size;
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab) {
      return fmt::format("prompt token {} (id {}) is outside the vocabulary of {} tokens", i, request.prompt[i], vocab);
    }
  }
  if (request.options.max_tokens < 0) return fmt::format("max_tokens {}: at least 0", request.options.max_tokens);
  if (request.logprobs && (*request.logprobs < 0 || *request.logprobs >= vocab)) {
    return fmt::format("logprobs: {} likeliest tokens of a vocabulary of {}", *request.logprobs, vocab);
  }
  try {
    Sampler(request.sampling, vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void BatchScheduler::admit() {
  const KvPages& pages = runner_.kv_pages();
  while (!waiting_.empty()) {
    const size_t id = waiting_.front();
    const GenerationRequest& request = record(id).request;
    // Done before it starts: it cannot run, or has nothing to generate.
    if (!record(id).result.error.empty() || request.options.max_tokens == 0) {
      waiting_.pop_front();
      end_waiting(id);
      continue;
    }
    const size_t slot_index = slot_for(request.prompt);
    if (slot_index == slots_.size()) return;
    const auto slot = slots_.begin() + ptrdiff_t(slot_index);
    // The positions it may come to hold: the last sampled token is never evaluated, but reserve it anyway.
    const int64_t positions = std::min<int64_t>(int64_t(request.prompt.size()) + request.options.max_tokens,
                                                runner_.context_size());
    const int64_t claim = std::max<int64_t>(0, pages.pages_for(positions) - slot->empty_pages);
    if (claim > capacity_) {
      waiting_.pop_front();
      record(id).result.error =
          fmt::format("the KV pool holds {} positions for these sequences; the prompt ({} tokens) and max_tokens ({}) "
                      "need {} (raise -c or lower --parallel or max_tokens)",
                      capacity_ * pages.page_size(), request.prompt.size(), request.options.max_tokens, positions);
      end_waiting(id);
      continue;
    }
    if (!make_room(claim, slot_index)) return;  // waits for running requests to free pages
    waiting_.pop_front();
    start(id, slot_index, claim);
  }
}

size_t BatchScheduler::slot_for(const std::vector<int32_t>& prompt) const {
  size_t best = slots_.size(), empty = slots_.size(), first = slots_.size();
  int64_t best_length = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.busy) continue;
    if (first == slots_.size()) first = i;
    if (s.kept.empty() && empty == slots_.size()) empty = i;
    if (const int64_t length = runner_.seq_reusable(s.seq, reusable_prefix(prompt, s.kept)); length > best_length) {
      best = i;
      best_length = length;
    }
  }
  return best != slots_.size() ? best : empty != slots_.size() ? empty : first;
}

int64_t BatchScheduler::kept_pages(size_t except) const {
  int64_t held = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (i != except && !s.busy) held += int64_t(runner_.kv_pages().pages(s.seq).size()) - s.empty_pages;
  }
  return held;
}

bool BatchScheduler::make_room(int64_t needed, size_t except) {
  for (size_t i = 0; i < slots_.size() && claimed_ + kept_pages(except) + needed > capacity_; ++i) {
    Slot& s = slots_[i];
    if (i == except || s.busy || s.kept.empty()) continue;
    runner_.seq_truncate(s.seq, 0);
    s.kept.clear();
  }
  return claimed_ + kept_pages(except) + needed <= capacity_;
}

void BatchScheduler::start(size_t request, size_t slot, int64_t claim) {
  const GenerationRequest& r = record(request).request;
  Sampler sampler(r.sampling, runner_.config().vocab_size);
  // The penalty window holds the prompt before its last token is evaluated, as in the Generator.
  for (const int32_t t : r.prompt) sampler.accept(t);
  // Held until deliver(), which hands it on with the log-probabilities it accounts for.
  TextSink sink = [this, request](std::string_view piece) {
    Record& rec = record(request);
    rec.result.text += piece;
    rec.unsent += piece;
  };
  std::optional<Drafting> drafting;
  if (options_.draft && !r.logprobs) {
    if (auto source = options_.draft(slots_[slot].seq, r)) drafting = Drafting{std::move(source), r.prompt, {}, {}, 0};
  }
  // Continue from what the slot kept of its last prompt, if this one begins alike.
  Slot& s = slots_[slot];
  const int64_t kept = options_.batch_invariant ? 0 : runner_.seq_reusable(s.seq, reusable_prefix(r.prompt, s.kept));
  runner_.seq_truncate(s.seq, kept);
  s.kept.clear();
  record(request).result.shared_prompt_tokens = kept;
  progress_.shared_prompt_tokens += kept;
  running_.push_back({request, slot, claim, std::move(sampler),
                      Completion(tokenizer_, r.options, runner_.context_size(), r.prompt), std::move(sink),
                      std::chrono::steady_clock::now(), kept, std::nullopt, std::move(drafting), std::nullopt, 0});
  s.busy = true;
  claimed_ += claim;
  ++progress_.running;
}

Output BatchScheduler::output_for(const Running& r) {
  // Only what the chain needs crosses from the backend: the best token, the
  // top (one list length serves the batch; a longer one samples the same), or
  // the row, which log-probabilities always need.
  if (record(r.request).request.logprobs) return Output::Logits;
  const Sampler& sampler = r.sampler;
  if (sampler.picks_highest_logit()) return Output::Argmax;
  if (const int64_t needed = sampler.top_needed(); needed > 0) {
    batch_.top_k = std::max(batch_.top_k, needed);
    return Output::Top;
  }
  return Output::Logits;
}

void BatchScheduler::cancel(size_t request) {
  Record& r = record(request);
  if (!r.finished) r.cancelled = true;
}

void BatchScheduler::end_cancelled() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const size_t id = *it;
    if (!record(id).cancelled) {
      ++it;
      continue;
    }
    it = waiting_.erase(it);
    record(id).result.stop = StopReason::Interrupted;
    end_waiting(id);
  }
  for (size_t i = running_.size(); i-- > 0;) {
    if (record(running_[i].request).cancelled) finish(i);
  }
}

bool BatchScheduler::step() {
  if (!first_step_) first_step_ = std::chrono::steady_clock::now();
  end_cancelled();
  admit();
  const bool work = !running_.empty();
  if (work) run_batch();
  progress_.seconds = seconds_since(*first_step_);
  if (callbacks_.on_progress) callbacks_.on_progress(progress_);
  return work || !waiting_.empty();
}

void BatchScheduler::add_decode_steps() {
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = running_[i];
    if (!r.next) continue;
    if (r.drafting) {
      add_verification_run(i);
      continue;
    }
    batch_.add(*r.next, r.cached, slots_[r.slot].seq, output_for(r), options_.batch_invariant);
    owner_.push_back(i);
  }
}

void BatchScheduler::add_prompt_chunks() {
  // Invariant: one chunk a pass, cut where the runner cuts the prompt alone
  // (no prefix is shared, so every sequence's prefill starts at 0).
  const int64_t alone_chunk = runner_.pass_chunk_entries();
  int64_t budget = options_.prompt_budget;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Running& r = running_[i];
    if (r.next || (r.cached == 0 && !share_prefix(i))) continue;
    const std::vector<int32_t>& prompt = record(r.request).request.prompt;
    const int64_t remaining = int64_t(prompt.size()) - r.cached;
    const int64_t n = options_.batch_invariant ? std::min(remaining, alone_chunk)
                                               : prompt_chunk(remaining, budget);
    if (n == 0) continue;
    const bool last = r.cached + n == int64_t(prompt.size());
    batch_.add_run(std::span(prompt).subspan(size_t(r.cached), size_t(n)), r.cached, slots_[r.slot].seq,
                   last ? output_for(r) : Output::None);
    owner_.insert(owner_.end(), size_t(n), i);
    budget -= n;
    progress_.prompt_tokens += n;
    if (options_.batch_invariant) return;
  }
}

void BatchScheduler::run_batch() {
  batch_.clear();
  batch_.top_k = 0;
  owner_.clear();
  // Decode steps (verification runs for a speculating request) first, then
  // prompt chunks in admission order within the budget (the head prompt
  // always gets one: the budget holds two minimal chunks). Invariant: the
  // prompt chunk first, so that the runner's first chunk of the pass starts
  // with it and holds all of it.
  const int64_t prompt_before = progress_.prompt_tokens;
  if (options_.batch_invariant) add_prompt_chunks();
  const size_t decode_begin = batch_.size();
  add_decode_steps();
  const bool decoding = batch_.size() > decode_begin;
  if (!options_.batch_invariant) add_prompt_chunks();
  const auto pass_start = std::chrono::steady_clock::now();
  runner_.forward(batch_, out_);
  const double pass_seconds = seconds_since(pass_start);
  if (progress_.prompt_tokens > prompt_before) progress_.prefill_seconds += pass_seconds;
  if (decoding) progress_.decode_seconds += pass_seconds;
  ++progress_.passes;

  std::vector<size_t> done;
  for (size_t e = 0; e < batch_.size(); ++e) {
    Running& r = running_[owner_[e]];
    const bool verifying = r.drafting && r.next;
    if (verifying && e != r.drafting->entry) continue;  // a draft entry: judged with its run's first
    if (!verifying) ++r.cached;
    if (batch_.entries[e].output == Output::None) continue;
    try {
      if (verifying) {
        if (!verify(r)) done.push_back(owner_[e]);
      } else {
        const int32_t token = sample(r, e);
        if (take(r, token, r.cached)) {
          r.next = token;
        } else {
          done.push_back(owner_[e]);
        }
      }
    } catch (const Error& ex) {
      record(r.request).result.error = ex.what();
      done.push_back(owner_[e]);
    }
    deliver(r);
  }
  // From the back, so the indices still to erase stay valid.
  std::sort(done.begin(), done.end());
  for (auto it = done.rbegin(); it != done.rend(); ++it) finish(*it);
}

std::optional<BatchScheduler::PrefixSource> BatchScheduler::prefix_source(size_t index) const {
  const std::vector<int32_t>& prompt = record(running_[index].request).request.prompt;
  std::optional<PrefixSource> best;
  for (size_t i = 0; i < index; ++i) {
    const int64_t length = reusable_prefix(prompt, record(running_[i].request).request.prompt);
    if (length > 0 && (!best || length > best->length)) best = PrefixSource{i, length};
  }
  return best;
}

bool BatchScheduler::share_prefix(size_t index) {
  if (options_.batch_invariant) return true;  // another sequence's chunks computed those rows
  const std::optional<PrefixSource> source = prefix_source(index);
  if (!source) return true;
  const Running& from = running_[source->running];
  if (from.cached < source->length) return false;  // its prefill is ahead in every pass: it gets there
  if (!runner_.seq_resumable(slots_[from.slot].seq, source->length)) return true;  // its window moved on: computed anew
  Running& r = running_[index];
  runner_.seq_copy_prefix(slots_[from.slot].seq, slots_[r.slot].seq, source->length);
  r.cached = source->length;
  record(r.request).result.shared_prompt_tokens = source->length;
  progress_.shared_prompt_tokens += source->length;
  return true;
}

void BatchScheduler::add_verification_run(size_t running_index) {
  Running& r = running_[running_index];
  Drafting& d = *r.drafting;
  const GenerationOptions& options = record(r.request).request.options;
  // The proposal follows the context and its pending token, as SpeculativeGenerator drafts.
  d.context.push_back(*r.next);
  const int64_t depth = draft_room(options_.draft_max, options.max_tokens, int64_t(r.completion.generated().size()),
                                   runner_.context_size(), r.cached);
  // A tree's nodes take cache positions too: within the pages the request claimed.
  const int64_t pages = slots_[r.slot].empty_pages + r.claim;
  const int64_t capacity = std::min(runner_.context_size(), pages * runner_.kv_pages().page_size());
  const int64_t nodes = tree_room(options_.draft_tree, capacity, r.cached);
  propose_draft(*d.source, d.context, depth, drafts_tree(runner_, options_.draft_tree, r.cached, nodes), nodes, d.chain,
                d.draft);
  d.entry = batch_.size();
  add_verification(batch_, *r.next, r.cached, slots_[r.slot].seq, d.draft, verification_output(r.sampler));
  owner_.insert(owner_.end(), d.draft.size() + 1, running_index);
}

bool BatchScheduler::verify(Running& r) {
  Drafting& d = *r.drafting;
  const Verification v = verifier_.verify({out_, d.entry, d.draft, d.source->distributions()}, r.sampler,
                                          [&](int32_t token, bool drafted) {
                                            const bool more = take(r, token, int64_t(d.context.size()));
                                            if (drafted && more) d.context.push_back(token);
                                            return more;
                                          });
  SpeculationStats& stats = record(r.request).result.speculation;
  for (SpeculationStats* s : {&stats, &progress_.speculation}) {
    ++s->passes;
    s->drafted += int64_t(d.draft.size());
    s->accepted += v.accepted;
  }
  // Rollback: the cache keeps what the context holds, the rejected drafts go.
  keep_verified(runner_, slots_[r.slot].seq, r.cached, verifier_.path(), int64_t(d.context.size()) - r.cached - 1);
  r.cached = int64_t(d.context.size());
  if (v.more) r.next = v.last;
  return v.more;
}

bool BatchScheduler::take(Running& r, int32_t token, int64_t cached) {
  const int64_t before = int64_t(r.completion.generated().size());
  const bool more = r.completion.take(token, cached, r.sampler, r.sink);
  const int64_t taken = int64_t(r.completion.generated().size()) - before;
  progress_.generated_tokens += taken;
  if (r.sampled && taken > 0) record(r.request).result.logprobs.push_back(std::move(*r.sampled));
  r.sampled.reset();
  return more;
}

void BatchScheduler::deliver(Running& r) {
  Record& rec = record(r.request);
  std::vector<TokenLogprobs>& logprobs = rec.result.logprobs;
  const size_t settled = std::min(r.completion.settled_tokens(), logprobs.size());
  for (size_t i = r.reported; i < settled; ++i) logprobs[i].text_offset = r.completion.text_offset(i);
  const std::span<const TokenLogprobs> fresh(logprobs.data() + r.reported, settled - r.reported);
  if (rec.unsent.empty() && fresh.empty()) return;
  if (callbacks_.on_text) callbacks_.on_text(r.request, rec.unsent, fresh);
  rec.unsent.clear();
  r.reported = settled;
}

int32_t BatchScheduler::sample(Running& r, size_t entry) {
  const size_t slot = size_t(out_.index[entry]);
  switch (batch_.entries[entry].output) {
    case Output::Argmax: return out_.argmax[slot];
    case Output::Top: return r.sampler.sample_top(out_.top[slot]);
    case Output::Logits: {
      const size_t vocab = size_t(runner_.config().vocab_size);
      const std::span<float> row = std::span(out_.logits).subspan(slot * vocab, vocab);
      const std::optional<int32_t> top = record(r.request).request.logprobs;
      if (!top) return r.sampler.sample(row);
      // Of the raw row: the sampler penalises it in place.
      std::vector<float> raw(row.begin(), row.end());
      const int32_t token = r.sampler.sample(row);
      r.sampled = token_logprobs(raw, token, *top);
      return token;
    }
    case Output::None: break;
  }
  fail("batch entry {} asked for no output", entry);
}

void BatchScheduler::finish(size_t running_index) {
  Running& r = running_[running_index];
  GenerationResult& result = record(r.request).result;
  if (result.error.empty()) r.completion.finish(r.sink);
  deliver(r);
  result.logprobs.resize(r.reported);  // the tokens of a stop string alone are not reported
  result.tokens = r.completion.generated();
  result.completion_tokens = int64_t(result.tokens.size());
  result.stop = record(r.request).cancelled ? StopReason::Interrupted : r.completion.stop();
  result.seconds = seconds_since(r.start);
  // The slot keeps its prompt's cache (rows its prefill computed, as alone) for a later prompt that begins alike.
  Slot& slot = slots_[r.slot];
  std::vector<int32_t>& prompt = record(r.request).request.prompt;
  const int64_t kept = result.error.empty() ? std::min({r.cached, int64_t(prompt.size()), runner_.seq_length(slot.seq)}) : 0;
  runner_.seq_truncate(slot.seq, kept);
  slot.kept.assign(prompt.begin(), prompt.begin() + ptrdiff_t(kept));
  prompt = {};
  slot.busy = false;
  claimed_ -= r.claim;
  const size_t request = r.request;
  record(request).finished = true;
  running_.erase(running_.begin() + ptrdiff_t(running_index));
  --progress_.running;
  ++progress_.finished;
  if (callbacks_.on_finish) callbacks_.on_finish(request, result);
}

std::vector<SlotState> BatchScheduler::slot_states() const {
  std::vector<SlotState> states(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) states[i].cached = int64_t(slots_[i].kept.size());
  for (const Running& r : running_) {
    const Record& rec = record(r.request);
    SlotState& s = states[r.slot];
    s.busy = true;
    s.request = r.request;
    s.prompt_tokens = rec.result.prompt_tokens;
    s.shared_prompt_tokens = rec.result.shared_prompt_tokens;
    s.generated_tokens = int64_t(r.completion.generated().size());
    s.max_tokens = rec.request.options.max_tokens;
    s.cached = r.cached;
  }
  return states;
}

void BatchScheduler::release(size_t request) {
  Record& r = record(request);
  if (!r.finished) fail("batch request {}: released before it finished", request);
  r.released = true;
  while (!records_.empty() && records_.front().released) {
    records_.pop_front();
    ++first_held_;
  }
}

void BatchScheduler::end_waiting(size_t request) {
  Record& r = record(request);
  r.request.prompt = {};
  r.finished = true;
  ++progress_.finished;
  if (callbacks_.on_finish) callbacks_.on_finish(request, r.result);
}

}  // namespace nt
