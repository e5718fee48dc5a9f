// The engine facade: what every front end that serves many requests drives
// (`batch`, the HTTP server, the C API). It opens the model and its draft
// source from plain data, takes requests from any thread, and runs them
// through continuous batching on one engine thread.
//
//   auto engine = Engine::open(options);        // loads; nt::Error says why not
//   RequestId id = engine->submit(request, sink);  // any thread; nt::Error for a bad request
//   engine->cancel(id);                         // any thread; takes effect at the next step
//   while (engine->step()) {}                   // the engine thread: one pass per step
//
// Submitted requests and cancellations wait in a queue until the engine
// thread's next step() takes them. A request's text pieces and its result
// come through its RequestSink, called on the engine thread; nothing else of
// the request is kept once its result is out. A cancelled request ends with
// StopReason::Interrupted and frees its sequence and KV pages at that step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/batch_scheduler.h"
#include "engine/drafts.h"
#include "engine/open_model.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"

namespace nt {

struct EngineOptions {
  OpenModelOptions model;  // its sequences are the slots: requests decoded at once
  DraftOptions draft;      // none enabled: no speculation
  int64_t prompt_budget = 256;  // prompt tokens per pass at most (SchedulerOptions::prompt_budget)
  bool batch_invariant = false; // every request computed as alone (SchedulerOptions::batch_invariant)
  std::string chat_template;    // a named format overriding the model's; empty: the model's
  std::string chat_template_file;  // a Jinja template file overriding the model's
  // What the engine chose or warns about while it opens and runs ("--draft-tree: 16 tokens per pass").
  std::function<void(const std::string&)> on_note;
};

using RequestId = uint64_t;

// A sequence slot as of the engine's last step.
struct EngineSlot {
  SlotState state;
  RequestId request = 0;  // busy: the request it runs
  std::string name;       // busy: the caller's name for that request (EngineRequest::name)
};

// What the engine has done, as of its last step: readable from any thread.
struct EngineStats {
  SchedulerProgress progress;
  int64_t most_running = 0;  // the most requests one pass has decoded together
  int64_t queued = 0;        // submitted, not yet taken by a step
  int64_t kv_pages = 0, kv_pages_free = 0;  // the KV pool (finished prompts' pages count as used until needed)
  int64_t kv_window_pages = 0, kv_window_pages_free = 0;  // the sliding-window layers' pool, where there is one
  uint64_t weight_bytes_per_token = 0;      // what one pass reads of the weights (streamed ones cross the link)
  ExpertTraffic experts;                    // a mixture of experts' cache, since load
  std::vector<EngineSlot> slots;            // in slot order
};

struct EngineRequest {
  std::optional<std::string> prompt;  // a raw completion, or
  std::optional<std::vector<int32_t>> prompt_ids;  // one given as token ids, or
  std::vector<ChatMessage> messages;  // a conversation, through the chat template, or
  // a conversation the caller rendered through chat_template() (with tools, or with
  // the start of the reply written ahead): tokenized with its special tokens, and
  // ended by the template's stop tokens as a conversation is
  std::optional<std::string> chat_prompt;
  SamplingParams sampling;
  int64_t max_tokens = 256;  // kNoTokenLimit: until end of text or a full context
  std::vector<std::string> stop;
  std::vector<int32_t> prediction;  // tokens the output is expected to resemble (drafts by lookup)
  std::vector<int32_t> kept_special;  // special tokens whose text stays in the reply (tool-call markers)
  bool ignore_eos = false;
  std::optional<int32_t> logprobs;  // GenerationRequest::logprobs
  std::string name;                 // the caller's name for it, shown in stats().slots (an HTTP reply's id)
};

// Called on the engine thread.
struct RequestSink {
  // Complete UTF-8 pieces as they come, with the log-probabilities of the
  // tokens they account for when the request asked for them (SchedulerCallbacks::on_text).
  std::function<void(std::string_view text, std::span<const TokenLogprobs> logprobs)> on_text;
  std::function<void(const GenerationResult& result)> on_finish; // once, last
};

class Engine {
 public:
  static std::unique_ptr<Engine> open(EngineOptions options);
  // An engine over a model already open (the C API's context): options.model
  // then gives only the sequences, which must be those the runner was opened with.
  static std::unique_ptr<Engine> open(EngineOptions options, OpenedModel model);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Encodes the request (chat template or raw) and queues it; nt::Error, with
  // nothing queued, for a conversation the template cannot render. Thread-safe.
  RequestId submit(EngineRequest request, RequestSink sink);
  // Thread-safe; a request already finished is left alone.
  void cancel(RequestId id);

  // The engine thread: takes what was queued, runs one pass, delivers text
  // and results. False once nothing is queued or running.
  bool step();
  // The engine thread, when step() said false: waits until a request or a
  // cancellation is queued, or `wake()` is called.
  void wait_for_work();
  void wake();

  const OpenedModel& model() const { return model_; }
  const Tokenizer& tokenizer() const { return *model_.tokenizer; }
  // The engine thread's view; stats() is the copy other threads read.
  const SchedulerProgress& progress() const { return scheduler_->progress(); }
  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  // The chat template requests with messages go through (made when first
  // needed: a model without one warns only then). Thread-safe.
  const ChatTemplate& chat_template() const;
  bool speculates() const { return options_.draft.enabled(); }

 private:
  Engine(EngineOptions options, std::optional<OpenedModel> model);
  std::unique_ptr<DraftSource> draft_for(SeqId seq, const GenerationRequest& request);
  // Moves queued submissions and cancellations into the scheduler.
  void take_queued();

  EngineOptions options_;
  OpenedModel model_;
  mutable std::mutex template_mutex_;
  mutable std::optional<ChatTemplate> chat_;
  std::optional<DraftModelSequences> draft_model_;
  std::unique_ptr<BatchScheduler> scheduler_;

  // A request between submit() and its result.
  struct Active {
    RequestId id;
    std::string name;
    RequestSink sink;
  };
  struct Queued {
    Active active;
    GenerationRequest request;
  };
  mutable std::mutex mutex_;  // guards the queue, the cancellations, next_id_ and stats_
  std::condition_variable work_;
  std::vector<Queued> queued_;
  std::vector<RequestId> cancelled_;
  RequestId next_id_ = 0;
  bool woken_ = false;
  EngineStats stats_;

  // The engine thread's own: the scheduler's index of each request in flight.
  std::unordered_map<RequestId, size_t> scheduled_;
  std::unordered_map<size_t, Active> sinks_;
  std::vector<size_t> finished_;  // released after the step that finished them
};

}  // namespace nt
