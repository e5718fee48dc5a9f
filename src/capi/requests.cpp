// The C API's requests: the engine facade (engine/engine.h) over the
// context's runner, stepped by a thread of the context's own. Each request's
// text and result land in a record that nt_request_poll drains; a text
// callback, when given, gets the text instead as it comes.
#include <algorithm>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "capi/api_guard.h"
#include "capi/context_internal.h"
#include "capi/handles.h"
#include "sampling/setting_limits.h"

using nt::capi::guard;
using nt::capi::need;
using nt::capi::refuse;
using nt::capi::RequestRecord;

namespace {

nt_stop_reason stop_reason(const nt::GenerationResult& result) {
  if (!result.error.empty()) return NT_STOP_ERROR;
  switch (result.stop) {
    case nt::StopReason::TokenLimit: return NT_STOP_TOKEN_LIMIT;
    case nt::StopReason::StopToken: return NT_STOP_END_OF_TEXT;
    case nt::StopReason::StopString: return NT_STOP_STOP_STRING;
    case nt::StopReason::ContextFull: return NT_STOP_CONTEXT_FULL;
    case nt::StopReason::Interrupted: return NT_STOP_CANCELLED;
  }
  return NT_STOP_ERROR;
}

void cancel_all(nt_context& ctx) {
  std::vector<nt_request_id> ids;
  {
    const std::lock_guard lock(ctx.requests_mutex);
    for (const auto& [id, record] : ctx.requests) {
      if (!record->done) ids.push_back(id);
    }
  }
  for (const nt_request_id id : ids) ctx.engine->cancel(id);
}

// Ends every request with `error` (a step that failed leaves the engine's state unknown).
void fail_all(nt_context& ctx, const std::string& error) {
  const std::lock_guard lock(ctx.requests_mutex);
  for (auto& [id, record] : ctx.requests) {
    if (record->done) continue;
    record->done = true;
    record->stop = NT_STOP_ERROR;
    record->error = error;
  }
  ctx.stopping = true;
  ctx.requests_changed.notify_all();
}

// The context's request thread: a step while there is work, else a wait.
void serve(nt_context* ctx) {
  const nt_model_params& mp = ctx->model->params;
  for (;;) {
    if (mp.abort_callback && mp.abort_callback(mp.abort_user_data)) cancel_all(*ctx);
    bool busy = false;
    try {
      const auto start = std::chrono::steady_clock::now();
      busy = ctx->engine->step();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::lock_guard lock(ctx->counters_mutex);
      ctx->request_seconds += seconds;
    } catch (const std::exception& e) {
      fail_all(*ctx, std::string("the request thread stopped: ") + e.what());
      return;
    } catch (...) {
      fail_all(*ctx, "the request thread stopped on an unknown exception");
      return;
    }
    if (busy) continue;
    {
      const std::lock_guard lock(ctx->requests_mutex);
      if (ctx->stopping) return;
    }
    ctx->engine->wait_for_work();
  }
}

void start_engine(nt_context& ctx) {
  for (size_t s = 0; s < ctx.sequences.size(); ++s) {
    if (ctx.runner->seq_length(ctx.sequences[s]) > 0) {
      refuse(NT_STATUS_INVALID_STATE, "nt_request_submit: sequence {} holds positions; requests start on an empty "
             "context (nt_memory_clear)", s);
    }
  }
  // The engine's scheduler takes the runner's sequences for its slots.
  for (size_t s = 1; s < ctx.sequences.size(); ++s) ctx.runner->seq_free(ctx.sequences[s]);
  ctx.sequences.resize(1);
  nt::EngineOptions options;
  options.model.path = ctx.model->path;
  options.model.sequences = int(ctx.params.n_seq_max);
  options.prompt_budget = std::max<int64_t>(2 * nt::kMinPromptChunk, ctx.params.n_batch);
  try {
    ctx.engine = nt::Engine::open(std::move(options), std::move(*ctx.opened));
  } catch (...) {
    ctx.broken = true;  // the opened model went with the engine that failed
    ctx.runner = nullptr;
    throw;
  }
  ctx.opened.reset();
  ctx.runner = ctx.engine->model().runner.get();
  nt::capi::forget_outputs(ctx);
  ctx.engine_thread = std::thread(serve, &ctx);
}

nt::EngineRequest make_request(const nt_model& model, const char* prompt, const char* messages_json,
                               const nt_request_params& p) {
  const char* f = "nt_request_submit";
  if ((prompt == nullptr) == (messages_json == nullptr)) {
    refuse(NT_STATUS_INVALID_ARGUMENT, "{}: give either prompt or messages_json (the other NULL)", f);
  }
  nt::EngineRequest r;
  if (prompt) {
    r.prompt = prompt;
  } else {
    nlohmann::json messages;
    try {
      messages = nlohmann::json::parse(messages_json);
    } catch (const nlohmann::json::exception& e) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "{}: messages_json is not JSON: {}", f, e.what());
    }
    if (!messages.is_array() || messages.empty()) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "{}: messages_json must be a non-empty array of {{\"role\", \"content\"}}", f);
    }
    for (size_t i = 0; i < messages.size(); ++i) {
      const auto& m = messages[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string()) {
        refuse(NT_STATUS_INVALID_ARGUMENT, "{}: message {} needs string fields \"role\" and \"content\"", f, i);
      }
      r.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    if (!model.chat) {
      refuse(NT_STATUS_UNSUPPORTED, "{}: {} has a chat template the engine cannot use; send a raw prompt", f, model.path);
    }
  }
  const auto check = [&](const nt::SettingLimit& limit, double value) {
    const std::string why = nt::check_limit(limit, value);
    if (!why.empty()) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: {} {}", f, limit.field, why);
  };
  check(nt::limits::kMaxTokens, p.max_tokens);
  check(nt::limits::kTemperature, p.temperature);
  check(nt::limits::kTopK, p.top_k);
  check(nt::limits::kTopP, p.top_p);
  check(nt::limits::kMinP, p.min_p);
  check(nt::limits::kRepeatPenalty, p.repeat_penalty);
  check(nt::limits::kRepeatLastN, p.repeat_last_n);
  check(nt::limits::kFrequencyPenalty, p.frequency_penalty);
  check(nt::limits::kPresencePenalty, p.presence_penalty);
  r.max_tokens = p.max_tokens < 0 ? nt::kNoTokenLimit : p.max_tokens;
  r.sampling.temperature = p.temperature;
  r.sampling.top_k = p.top_k;
  r.sampling.top_p = p.top_p;
  r.sampling.min_p = p.min_p;
  r.sampling.repeat_penalty = p.repeat_penalty;
  r.sampling.repeat_last_n = p.repeat_last_n;
  r.sampling.frequency_penalty = p.frequency_penalty;
  r.sampling.presence_penalty = p.presence_penalty;
  r.sampling.seed = p.seed;
  r.ignore_eos = p.ignore_eos;
  if (!p.stop && p.n_stop > 0) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: stop is NULL but n_stop is {}", f, p.n_stop);
  for (size_t i = 0; i < p.n_stop; ++i) {
    if (!p.stop[i] || !*p.stop[i]) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: stop string {} is NULL or empty", f, i);
    r.stop.emplace_back(p.stop[i]);
  }
  return r;
}

// The longest prefix of `text` of at most `room` bytes that ends between UTF-8 characters.
size_t whole_characters(const std::string& text, size_t room) {
  if (text.size() <= room) return text.size();
  size_t end = room;
  while (end > 0 && (uint8_t(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace

namespace nt::capi {

void stop_requests(nt_context& ctx) {
  if (!ctx.engine) return;
  if (ctx.engine_thread.joinable()) {
    cancel_all(ctx);
    {
      const std::lock_guard lock(ctx.requests_mutex);
      ctx.stopping = true;
    }
    ctx.engine->wake();
    ctx.engine_thread.join();
  }
}

void request_counters(const nt_context& ctx, nt_counters& out) {
  const std::lock_guard lock(ctx.counters_mutex);
  out.passes = ctx.passes;
  out.tokens = ctx.decoded;
  out.seconds = ctx.seconds + ctx.request_seconds;
  if (ctx.engine) {
    const nt::EngineStats stats = ctx.engine->stats();
    out.passes += stats.progress.passes - ctx.request_passes_base;
    out.prompt_tokens = stats.progress.prompt_tokens - ctx.request_prompt_base;
    out.generated_tokens = stats.progress.generated_tokens - ctx.request_generated_base;
    out.tokens += out.prompt_tokens + out.generated_tokens;
    out.weight_bytes_per_token = stats.weight_bytes_per_token > 0 ? stats.weight_bytes_per_token : out.weight_bytes_per_token;
  }
}

void reset_request_counters(nt_context& ctx) {
  const std::lock_guard lock(ctx.counters_mutex);
  ctx.passes = ctx.decoded = 0;
  ctx.seconds = ctx.request_seconds = 0;
  if (ctx.engine) {
    const nt::EngineStats stats = ctx.engine->stats();
    ctx.request_passes_base = stats.progress.passes;
    ctx.request_prompt_base = stats.progress.prompt_tokens;
    ctx.request_generated_base = stats.progress.generated_tokens;
  }
}

}  // namespace nt::capi

extern "C" {

nt_request_params nt_request_default_params(void) {
  nt_request_params p;
  std::memset(&p, 0, sizeof p);
  const nt::SamplingParams d;
  p.max_tokens = 256;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.repeat_last_n = d.repeat_last_n;
  p.frequency_penalty = d.frequency_penalty;
  p.presence_penalty = d.presence_penalty;
  p.seed = 0;
  return p;
}

nt_status nt_request_submit(nt_context* ctx, const char* prompt, const char* messages_json,
                            const nt_request_params* params, nt_request_id* out) {
  return guard([&] {
    nt_context& c = nt::capi::context_arg(ctx, "nt_request_submit");
    need(params, "nt_request_submit", "params");
    need(out, "nt_request_submit", "out");
    nt::EngineRequest request = make_request(*c.model, prompt, messages_json, *params);
    auto record = std::make_shared<RequestRecord>();
    record->on_text = params->on_text;
    record->user_data = params->user_data;
    std::unique_lock lock(c.requests_mutex);
    if (c.stopping) refuse(NT_STATUS_INVALID_STATE, "nt_request_submit: the context's request thread has stopped");
    if (!c.engine) start_engine(c);
    nt::Engine& engine = *c.engine;
    // The sinks run on the request thread and take requests_mutex, which is
    // held here until the record has its id: they never see it unset.
    auto id_slot = std::make_shared<nt_request_id>(0);
    nt::RequestSink sink;
    sink.on_text = [&c, record, id_slot](std::string_view text, std::span<const nt::TokenLogprobs>) {
      if (text.empty()) return;  // log-probabilities alone, which this API does not ask for
      nt_request_id id;
      {
        const std::lock_guard lock(c.requests_mutex);
        id = *id_slot;
        if (!record->on_text) {
          record->text.append(text);
          c.requests_changed.notify_all();
          return;
        }
      }
      if (!record->on_text(id, text.data(), text.size(), record->user_data)) c.engine->cancel(id);
    };
    sink.on_finish = [&c, record](const nt::GenerationResult& result) {
      const std::lock_guard lock(c.requests_mutex);
      record->done = true;
      record->stop = stop_reason(result);
      record->error = result.error;
      record->prompt_tokens = int32_t(result.prompt_tokens);
      record->completion_tokens = int32_t(result.completion_tokens);
      c.requests_changed.notify_all();
    };
    const nt::RequestId id = engine.submit(std::move(request), std::move(sink));
    *id_slot = id;
    c.requests.emplace(id, record);
    *out = id;
    return NT_STATUS_OK;
  });
}

nt_status nt_request_poll(nt_context* ctx, nt_request_id id, int32_t timeout_ms, char* buf, size_t buf_size,
                          size_t* n_bytes, nt_request_status* status) {
  return guard([&] {
    nt_context& c = nt::capi::context_arg(ctx, "nt_request_poll");
    if (!buf && buf_size > 0) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_request_poll: buf is NULL but buf_size is {}", buf_size);
    if (buf && buf_size == 0) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_request_poll: buf_size 0 leaves no room for the NUL");
    if (buf) need(n_bytes, "nt_request_poll", "n_bytes");
    if (timeout_ms < -1) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_request_poll: timeout_ms {} (-1: no limit)", timeout_ms);
    std::unique_lock lock(c.requests_mutex);
    const auto found = c.requests.find(id);
    if (found == c.requests.end()) refuse(NT_STATUS_NOT_FOUND, "nt_request_poll: no request {} (unknown, or polled to its end)", id);
    const std::shared_ptr<RequestRecord> record = found->second;
    const auto ready = [&] { return record->done || (buf && !record->text.empty()); };
    if (timeout_ms == -1) {
      c.requests_changed.wait(lock, ready);
    } else if (timeout_ms > 0) {
      c.requests_changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    }
    size_t copied = 0;
    if (buf) {
      copied = whole_characters(record->text, buf_size - 1);
      std::memcpy(buf, record->text.data(), copied);
      buf[copied] = '\0';
      record->text.erase(0, copied);
      *n_bytes = copied;
    } else if (n_bytes) {
      *n_bytes = 0;
    }
    const bool finished = record->done && record->text.empty();
    if (status) {
      status->state = finished ? NT_REQUEST_DONE : NT_REQUEST_RUNNING;
      status->stop = finished ? record->stop : NT_STOP_NONE;
      status->prompt_tokens = record->prompt_tokens;
      status->completion_tokens = record->completion_tokens;
    }
    if (finished) {
      c.requests.erase(found);
      if (record->stop == NT_STOP_ERROR) {
        refuse(NT_STATUS_ENGINE_ERROR, "request {}: {}", id, record->error.empty() ? "failed" : record->error);
      }
    }
    return NT_STATUS_OK;
  });
}

nt_status nt_request_cancel(nt_context* ctx, nt_request_id id) {
  return guard([&] {
    nt_context& c = nt::capi::context_arg(ctx, "nt_request_cancel");
    {
      const std::lock_guard lock(c.requests_mutex);
      if (!c.requests.count(id)) refuse(NT_STATUS_NOT_FOUND, "nt_request_cancel: no request {}", id);
    }
    c.engine->cancel(id);
    return NT_STATUS_OK;
  });
}

}  // extern "C"
