#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "engine/lookup_draft.h"
#include "engine/prompts.h"
#include "engine/tree_budget.h"

namespace nt {

std::unique_ptr<Engine> Engine::open(EngineOptions options) {
  return std::unique_ptr<Engine>(new Engine(std::move(options), std::nullopt));
}

std::unique_ptr<Engine> Engine::open(EngineOptions options, OpenedModel model) {
  return std::unique_ptr<Engine>(new Engine(std::move(options), std::move(model)));
}

Engine::Engine(EngineOptions options, std::optional<OpenedModel> model) : options_(std::move(options)) {
  model_ = model ? std::move(*model) : open_model(target_open_options(options_.model, options_.draft));
  options_.model.on_load_progress = nullptr;  // the caller's progress line ends with the load
  const auto note = [this](const std::string& text) {
    if (options_.on_note) options_.on_note(text);
  };
  for (const std::string& w : model_.tokenizer->warnings()) note("warning: " + w);
  if (!options_.chat_template.empty() || !options_.chat_template_file.empty()) chat_template();  // a bad one fails now

  SchedulerOptions so;
  so.parallel = options_.model.sequences;
  so.prompt_budget = options_.prompt_budget;
  so.batch_invariant = options_.batch_invariant;
  so.draft_max = options_.draft.max;
  if (!options_.draft.model.empty()) {
    draft_model_.emplace(options_.draft.model, options_.model, model_, options_.model.sequences);
  }
  // Every request may draft: one with a prediction of its own drafts by lookup from it.
  so.draft = [this](SeqId seq, const GenerationRequest& request) { return draft_for(seq, request); };
  if (options_.draft.enabled()) {
    GenerationRequest check;
    check.prediction = options_.draft.prediction;
    draft_for(0, check);  // a bad --draft-self count fails here, before any request runs
    std::string tree_note;
    so.draft_tree = resolve_draft_tree(options_.draft, *model_.runner, &tree_note);
    if (!tree_note.empty()) note(tree_note);
    warm_up_verification(*model_.runner, 0, so.draft_max, so.draft_tree > 0);
  }
  SchedulerCallbacks callbacks;
  callbacks.on_text = [this](size_t request, std::string_view text, std::span<const TokenLogprobs> logprobs) {
    const auto found = sinks_.find(request);
    if (found != sinks_.end() && found->second.sink.on_text) found->second.sink.on_text(text, logprobs);
  };
  callbacks.on_finish = [this](size_t request, const GenerationResult& result) {
    const auto found = sinks_.find(request);
    if (found == sinks_.end()) return;
    const Active active = std::move(found->second);
    sinks_.erase(found);
    scheduled_.erase(active.id);
    finished_.push_back(request);
    if (active.sink.on_finish) active.sink.on_finish(result);
  };
  scheduler_ = std::make_unique<BatchScheduler>(*model_.runner, *model_.tokenizer, so, std::move(callbacks));
}

Engine::~Engine() = default;

std::unique_ptr<DraftSource> Engine::draft_for(SeqId seq, const GenerationRequest& request) {
  if (!request.prediction.empty()) return LookupDraft::predicting(request.prediction);
  if (draft_model_) return draft_model_->draft_for(seq, request.sampling);
  return make_target_draft(options_.draft, model_, request.sampling, seq, options_.on_note);
}

const ChatTemplate& Engine::chat_template() const {
  const std::lock_guard lock(template_mutex_);
  if (!chat_) {
    // Made when first needed: a model without a template warns only then.
    chat_ = ChatTemplate::for_tokenizer(*model_.tokenizer, options_.chat_template, options_.chat_template_file);
    if (!chat_->warning().empty() && options_.on_note) options_.on_note("warning: " + chat_->warning());
  }
  return *chat_;
}

RequestId Engine::submit(EngineRequest request, RequestSink sink) {
  EncodedPrompt prompt = request.prompt        ? encode_completion(*model_.tokenizer, *request.prompt)
                         : request.prompt_ids  ? encode_completion_ids(*model_.tokenizer, *request.prompt_ids)
                         : request.chat_prompt ? encode_rendered_conversation(*model_.tokenizer, chat_template(),
                                                                              *request.chat_prompt)
                                               : encode_conversation(*model_.tokenizer, chat_template(), request.messages);
  GenerationRequest generation;
  generation.prompt = std::move(prompt.tokens);
  generation.sampling = request.sampling;
  generation.options.max_tokens = request.max_tokens;
  if (!request.ignore_eos) generation.options.stop_tokens = std::move(prompt.stop_tokens);
  generation.options.stop_strings = std::move(request.stop);
  generation.options.kept_special = std::move(request.kept_special);
  generation.prediction = request.prediction.empty() ? options_.draft.prediction : std::move(request.prediction);
  generation.logprobs = request.logprobs;
  const std::lock_guard lock(mutex_);
  const RequestId id = next_id_++;
  ++stats_.queued;
  queued_.push_back({{id, std::move(request.name), std::move(sink)}, std::move(generation)});
  work_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  const std::lock_guard lock(mutex_);
  cancelled_.push_back(id);
  work_.notify_one();
}

void Engine::wake() {
  const std::lock_guard lock(mutex_);
  woken_ = true;
  work_.notify_one();
}

void Engine::wait_for_work() {
  std::unique_lock lock(mutex_);
  work_.wait(lock, [this] { return woken_ || !queued_.empty() || !cancelled_.empty(); });
  woken_ = false;
}

void Engine::take_queued() {
  std::vector<Queued> queued;
  std::vector<RequestId> cancelled;
  {
    const std::lock_guard lock(mutex_);
    queued.swap(queued_);
    cancelled.swap(cancelled_);
  }
  for (Queued& q : queued) {
    if (std::find(cancelled.begin(), cancelled.end(), q.active.id) != cancelled.end()) {
      // Cancelled before it reached the scheduler: it ends without running.
      GenerationResult result;
      result.prompt_tokens = int64_t(q.request.prompt.size());
      result.stop = StopReason::Interrupted;
      if (q.active.sink.on_finish) q.active.sink.on_finish(result);
      continue;
    }
    const RequestId id = q.active.id;
    const size_t index = scheduler_->submit(std::move(q.request));
    scheduled_.emplace(id, index);
    sinks_.emplace(index, std::move(q.active));
  }
  for (const RequestId id : cancelled) {
    if (const auto found = scheduled_.find(id); found != scheduled_.end()) scheduler_->cancel(found->second);
  }
}

bool Engine::step() {
  take_queued();
  const bool busy = scheduler_->step();
  for (const size_t request : finished_) scheduler_->release(request);
  finished_.clear();
  const std::lock_guard lock(mutex_);
  stats_.progress = scheduler_->progress();
  stats_.most_running = std::max(stats_.most_running, stats_.progress.running);
  stats_.queued = int64_t(queued_.size());
  stats_.kv_pages = model_.runner->kv_pages().page_count();
  stats_.kv_pages_free = model_.runner->kv_pages().free_pages();
  if (const KvPages* window = model_.runner->window_pages()) {
    stats_.kv_window_pages = window->page_count();
    stats_.kv_window_pages_free = window->free_pages();
  }
  stats_.weight_bytes_per_token = model_.runner->weight_bytes_per_token();
  stats_.experts = model_.runner->expert_traffic();
  stats_.slots.clear();
  for (const SlotState& state : scheduler_->slot_states()) {
    EngineSlot& slot = stats_.slots.emplace_back();
    slot.state = state;
    const auto active = state.busy ? sinks_.find(state.request) : sinks_.end();
    if (active != sinks_.end()) {
      slot.request = active->second.id;
      slot.name = active->second.name;
    }
  }
  return busy || !queued_.empty() || !cancelled_.empty();
}

EngineStats Engine::stats() const {
  const std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace nt
