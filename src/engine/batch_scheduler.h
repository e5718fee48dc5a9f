// Continuous batching: many generation requests over one ModelRunner, one
// forward pass per step. A step's batch holds the next token of every
// decoding sequence plus chunks of admitted prompts, at most prompt_budget
// prompt tokens per pass, so a long prompt delays the others' next tokens by
// one chunk at a time rather than by its whole prefill. Each request samples
// on the host with its own Sampler from the least its chain needs (the
// argmax, the top, or the row) and stops and streams its text through a
// Completion, exactly as the Generator would run it alone. A request is
// admitted, in submission order, when a sequence slot is free and the KV
// pool can hold its prompt plus max_tokens (clamped to the context); a
// finished request empties its slot for the next one.
//
// With a draft source (SchedulerOptions::draft), a decoding sequence drafts
// before each pass and puts its pending token and its draft in the pass as
// one verification run: one read of the weights verifies every sequence's
// draft (a chain, or a token tree with SchedulerOptions::draft_tree). Each
// keeps what the target confirms (engine/draft_verifier.h, as the
// SpeculativeGenerator does alone) and truncates the rest away.
//
// Prompts that begin alike (a shared system prompt) share their KV: a request
// about to prefill copies the longest prefix of its prompt that an earlier
// running request's cache holds (ModelRunner::seq_copy_prefix; a paged pool
// shares the pages) and evaluates only the rest. When that earlier request is
// still prefilling, the later one waits until the prefix is cached. A
// finished request's slot keeps its prompt's cache until the slot is taken
// again: a request goes to the free slot whose kept prompt begins as its own
// and continues from there (kept caches give their pages back when the pool
// needs them).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/completion.h"
#include "engine/draft_verifier.h"
#include "engine/speculative.h"
#include "runtime/model_runner.h"
#include "sampling/sampler.h"
#include "sampling/token_logprobs.h"
#include "tokenizer/tokenizer.h"

namespace nt {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when the model wants one
  SamplingParams sampling;      // the request's own sampler is seeded with sampling.seed
  GenerationOptions options;    // max_tokens, stop tokens, stop strings
  std::vector<int32_t> prediction;  // tokens the output is expected to resemble (a lookup draft reads them)
  // Set: each generated token's log-probability and those of this many
  // likeliest tokens (sampling/token_logprobs.h). Such a request samples from
  // the whole row of logits, copied from the backend, and does not draft.
  std::optional<int32_t> logprobs;
};

struct GenerationResult {
  std::string text;
  std::vector<int32_t> tokens;  // the generated ids, without a stop token
  int64_t prompt_tokens = 0;
  int64_t shared_prompt_tokens = 0;  // of them, taken from a cached prefix instead of evaluated
  int64_t completion_tokens = 0;
  StopReason stop = StopReason::TokenLimit;
  double seconds = 0;  // from admission to the end
  std::string error;   // why the request could not run or went wrong; empty when it ran
  SpeculationStats speculation;  // passes: its verification runs; zero without a draft
  // With GenerationRequest::logprobs: one per token of `tokens` whose text is
  // in `text` (Completion::settled_tokens: a stop string's own tokens are left out).
  std::vector<TokenLogprobs> logprobs;
};

struct SchedulerProgress {
  int64_t requests = 0;  // submitted
  int64_t finished = 0;
  int64_t running = 0;
  int64_t prompt_tokens = 0;     // prompt positions evaluated
  int64_t shared_prompt_tokens = 0;  // prompt positions taken from a cache instead: another request's, or the slot's
  int64_t generated_tokens = 0;  // tokens taken into completions
  int64_t passes = 0;            // forward passes run
  double seconds = 0;            // since the first step
  // Time in passes that evaluated prompt tokens, and in passes that decoded:
  // a pass doing both counts in both, so each rate is that phase's pace.
  double prefill_seconds = 0, decode_seconds = 0;
  SpeculationStats speculation;  // over every request's verification runs
};

// A prompt is cut into chunks of at least this many tokens (a shorter prompt
// goes whole): a sliver reads all the weights for almost nothing, and a
// backend may take other kernels for a short run than for the whole prompt
// (the CPU does under 4 tokens), which would change the sequence's numbers
// from what it gets alone.
inline constexpr int64_t kMinPromptChunk = 16;

// A request's draft source, for its sequence, its sampling and its
// prediction; null: it decodes without speculation.
using DraftFactory = std::function<std::unique_ptr<DraftSource>(SeqId seq, const GenerationRequest& request)>;

struct SchedulerOptions {
  int parallel = 1;             // sequences in flight at once
  int64_t prompt_budget = 256;  // prompt tokens per pass at most; at least 2 * kMinPromptChunk
  DraftFactory draft;           // unset: no speculation
  int64_t draft_max = 8;        // tokens drafted per sequence and pass at most (>= 1), along each path of a tree
  int64_t draft_tree = 0;       // with a draft: tokens of a sequence's token tree per pass (>= 2); 0: chains
  // Every sequence gets the numbers it gets alone, so its output is the
  // Generator's token for token on any backend (batching otherwise may round
  // differently on the GPU, and the model can turn a last-bit difference
  // into another token): decode steps run stepwise (BatchEntry::stepwise),
  // a pass prefills one prompt chunk, cut where the runner cuts the prompt
  // alone (ModelRunner::pass_chunk_entries; prompt_budget is not used), and
  // prompts share no cached prefix. It costs the fast batched kernels.
  bool batch_invariant = false;
};

// What a sequence slot holds and does, for a status report.
struct SlotState {
  bool busy = false;
  size_t request = 0;                // busy: the request it runs
  int64_t prompt_tokens = 0;         // busy: the request's prompt
  int64_t shared_prompt_tokens = 0;  // busy: of them, taken from a cache instead of evaluated
  int64_t generated_tokens = 0;      // busy: so far
  int64_t max_tokens = 0;            // busy: the request's limit
  int64_t cached = 0;                // positions its cache holds (free: the prompt kept for a later request)
};

struct SchedulerCallbacks {
  // Complete UTF-8 pieces as they come, with the log-probabilities of the
  // tokens the text so far accounts for (GenerationRequest::logprobs; empty
  // when not asked for). Either may be empty, not both.
  std::function<void(size_t request, std::string_view text, std::span<const TokenLogprobs> logprobs)> on_text;
  std::function<void(size_t request, const GenerationResult& result)> on_finish;
  std::function<void(const SchedulerProgress& progress)> on_progress;  // after each step
};

class BatchScheduler {
 public:
  // Takes over the runner's sequences while it lives: the default sequence
  // (emptied) and parallel - 1 more that it allocates (nt::Error when the
  // runner cannot hold that many).
  BatchScheduler(ModelRunner& runner, const Tokenizer& tokenizer, SchedulerOptions options,
                 SchedulerCallbacks callbacks = {});
  ~BatchScheduler();
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Queues a request; its index (0, 1, ... in submission order) names it in
  // the callbacks and in result().
  size_t submit(GenerationRequest request);

  // Admits what fits, runs one pass, samples, and finishes what stopped (a
  // request that cannot run finishes here with an error). False once no
  // request is left.
  bool step();
  void run() {
    while (step()) {
    }
  }

  // Ends the request at the next step with StopReason::Interrupted: a waiting
  // one never starts, a running one keeps what it generated and frees its
  // sequence. Nothing happens to a finished one.
  void cancel(size_t request);

  // A submitted request's result; throws nt::Error once it is released.
  const GenerationResult& result(size_t request) const { return record(request).result; }
  // Drops a finished request (its caller has written it out). Requests are
  // held until every earlier one is released too, so that a long run whose
  // caller releases in order holds only about what is in flight.
  void release(size_t request);
  // Requests held: from the first not released to the last submitted.
  size_t held() const { return records_.size(); }
  const SchedulerProgress& progress() const { return progress_; }
  // Each slot's state, in slot order.
  std::vector<SlotState> slot_states() const;

 private:
  struct Slot {
    SeqId seq = 0;
    int64_t empty_pages = 0;  // pages the sequence holds when empty (one per sequence in some layouts)
    bool busy = false;
    std::vector<int32_t> kept;  // free: the prompt its cache still holds from its last request
  };
  // A speculating request's drafting state.
  struct Drafting {
    std::unique_ptr<DraftSource> source;
    std::vector<int32_t> context;  // the tokens its sequence's cache holds
    std::vector<int32_t> chain;    // a chain proposed for this pass
    DraftTree draft;               // proposed for this pass
    size_t entry = 0;              // its verification run's first entry in this pass
  };
  // A request holding a slot.
  struct Running {
    size_t request;
    size_t slot;
    int64_t claim;  // pages of the pool it may come to hold, beyond its slot's empty_pages
    Sampler sampler;
    Completion completion;
    TextSink sink;  // into the result's text and on_text
    std::chrono::steady_clock::time_point start;
    int64_t cached = 0;  // positions in its sequence's cache
    std::optional<int32_t> next;  // the sampled token to evaluate; empty while prefilling
    std::optional<Drafting> drafting;  // absent: plain decoding
    std::optional<TokenLogprobs> sampled;  // the log-probabilities of the token sampled last, until it is taken
    size_t reported = 0;                   // result.logprobs handed to on_text so far
  };

  // Ends the requests cancel() marked.
  void end_cancelled();
  void admit();
  // The free slot for `prompt`: the one whose kept prompt it continues
  // furthest, else an empty one, else the first free one; slots_.size() when none is free.
  size_t slot_for(const std::vector<int32_t>& prompt) const;
  // Pool pages the free slots' kept caches hold, beside `except`.
  int64_t kept_pages(size_t except) const;
  // Drops the kept caches of free slots other than `except` until `needed`
  // pages are unclaimed; whether that many are.
  bool make_room(int64_t needed, size_t except);
  // The running request (admitted before running_[index]) whose prompt
  // running_[index]'s may reuse the longest prefix of (at least
  // kMinPromptChunk tokens, and its last kMinPromptChunk evaluated), and that length.
  struct PrefixSource {
    size_t running = 0;
    int64_t length = 0;
  };
  std::optional<PrefixSource> prefix_source(size_t index) const;
  // Before running_[index] prefills: copies its prefix source's cached
  // prefix, or returns false while that source has not cached it yet.
  bool share_prefix(size_t index);
  // Why the request can never run, or empty.
  std::string check(const GenerationRequest& request) const;
  void start(size_t request, size_t slot, int64_t claim);
  Output output_for(const Running& r);
  void run_batch();
  // This pass's next token of every decoding request (or its verification run).
  void add_decode_steps();
  // This pass's prompt chunks, in admission order.
  void add_prompt_chunks();
  // Drafts for r and adds its verification run.
  void add_verification_run(size_t running_index);
  // The token sampled from entry i's output.
  int32_t sample(Running& r, size_t entry);
  // Judges r's verification run after the pass; whether it goes on.
  bool verify(Running& r);
  // Hands r's completion the token sampled after `cached` positions; whether generation goes on.
  bool take(Running& r, int32_t token, int64_t cached);
  // Hands on_text what r's completion released since the last call, with the log-probabilities it settled.
  void deliver(Running& r);
  void finish(size_t running_index);
  void end_waiting(size_t request);

  ModelRunner& runner_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  SchedulerCallbacks callbacks_;
  std::vector<Slot> slots_;
  int64_t capacity_ = 0;  // pool pages the slots may claim between them
  int64_t claimed_ = 0;   // claimed by the running requests

  struct Record {
    GenerationRequest request;  // its prompt is dropped once it finishes
    GenerationResult result;
    std::string unsent;  // text released and not yet handed to on_text
    bool finished = false;
    bool released = false;
    bool cancelled = false;
  };
  Record& record(size_t request);
  const Record& record(size_t request) const;
  std::deque<Record> records_;  // requests first_held_ on
  size_t first_held_ = 0;
  std::deque<size_t> waiting_;
  std::vector<Running> running_;  // in admission order

  Batch batch_;
  BatchOutputs out_;
  DraftVerifier verifier_;
  std::vector<size_t> owner_;  // per batch entry: its index in running_
  std::optional<std::chrono::steady_clock::time_point> first_step_;
  SchedulerProgress progress_;
};

}  // namespace nt
