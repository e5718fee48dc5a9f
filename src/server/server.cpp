#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "server/anthropic_api.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/status_json.h"
#include "server/web_page.h"

namespace nt::server {
namespace {

using nlohmann::json;

// How often a waiting HTTP thread looks up from its channel: to see a client
// gone or the server stopping.
constexpr auto kPollInterval = std::chrono::milliseconds(100);

// Text pieces and results of one HTTP request's choices, from the engine
// thread to the HTTP thread that answers it.
class Channel {
 public:
  struct Event {
    int choice = 0;
    std::string text;
    std::vector<TokenLogprobs> logprobs;     // of the tokens `text` completes, when asked for
    std::optional<GenerationResult> result;  // set: the choice ended
  };

  void push(Event e) {
    {
      const std::lock_guard lock(mutex_);
      events_.push_back(std::move(e));
    }
    ready_.notify_one();
  }
  // Events taken out early go back in front.
  void put_back(std::deque<Event> events) {
    const std::lock_guard lock(mutex_);
    events_.insert(events_.begin(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
  }
  // The events so far, waiting up to kPollInterval for one.
  std::deque<Event> take() {
    std::unique_lock lock(mutex_);
    ready_.wait_for(lock, kPollInterval, [this] { return !events_.empty(); });
    std::deque<Event> out;
    out.swap(events_);
    return out;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
};

// Answers within the API the route speaks.
enum class Dialect { OpenAi, Anthropic };

void send_error(httplib::Response& res, Dialect dialect, int status, const std::string& message,
                const std::string& param = {}, const std::string& type = "invalid_request_error") {
  res.status = status;
  const json body = dialect == Dialect::Anthropic ? anthropic_error_body(status, message)
                                                   : error_body(status, message, param, type);
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_json(httplib::Response& res, const json& body) {
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

std::string sse(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// Compares without an early exit, so the time taken does not tell how much of a guess was right.
bool same_secret(const std::string& given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) diff |= uint8_t(given[i]) ^ uint8_t(key[i % std::max<size_t>(1, key.size())]);
  return diff == 0;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Server::Impl {
  ServerOptions o;
  std::function<std::unique_ptr<Engine>()> open;
  httplib::Server http;
  std::unique_ptr<Engine> engine;
  std::atomic<bool> ready{false}, stopping{false};
  std::atomic<int> in_flight{0};  // generation requests accepted and not answered
  std::atomic<uint64_t> next_id{0};
  Metrics metrics;
  // Set on the engine thread before `ready`: GET /props, and a sequence's context.
  nlohmann::json props;
  int64_t context = 0;

  // Waits for the first events of a stream: a request that fails at once
  // (a prompt over the context) is answered with an error status, not a stream.
  std::deque<Channel::Event> first_events(Channel& channel, const std::vector<RequestId>& ids) {
    for (;;) {
      if (stopping) {
        for (const RequestId id : ids) engine->cancel(id);
      }
      std::deque<Channel::Event> events = channel.take();
      if (!events.empty()) return events;
    }
  }

  // A request's id for the client: "chatcmpl-17".
  std::string reply_id(std::string_view prefix) { return fmt::format("{}-{}", prefix, next_id++); }

  bool refuse_when_not_ready(httplib::Response& res, Dialect dialect) {
    if (ready) return false;
    res.set_header("Retry-After", "1");
    send_error(res, dialect, 503, "the model is loading", {}, "unavailable_error");
    return true;
  }

  // Submits the choices; the ids, or an error sent (nothing left submitted).
  std::optional<std::vector<RequestId>> submit(const EngineRequest& request, int choices, bool vary_seed,
                                                const std::shared_ptr<Channel>& channel, httplib::Response& res,
                                                Dialect dialect) {
    if (in_flight.fetch_add(1) >= o.slots + o.max_waiting) {
      --in_flight;
      res.set_header("Retry-After", "1");
      send_error(res, dialect, 503, fmt::format("the server is full: {} requests run or wait; try again", o.slots + o.max_waiting),
                 {}, "unavailable_error");
      metrics.refused();
      return std::nullopt;
    }
    std::vector<RequestId> ids;
    try {
      for (int i = 0; i < choices; ++i) {
        EngineRequest choice = request;
        if (vary_seed) choice.sampling.seed += uint64_t(i);
        RequestSink sink;
        sink.on_text = [channel, i](std::string_view text, std::span<const TokenLogprobs> logprobs) {
          channel->push({i, std::string(text), {logprobs.begin(), logprobs.end()}, std::nullopt});
        };
        sink.on_finish = [this, channel, i](const GenerationResult& r) {
          metrics.finished(r);
          channel->push({i, {}, {}, r});
        };
        ids.push_back(engine->submit(std::move(choice), std::move(sink)));
      }
    } catch (const Error& e) {  // a conversation the template cannot render, a token id outside the vocabulary
      for (const RequestId id : ids) engine->cancel(id);
      --in_flight;
      send_error(res, dialect, 400, e.what(), request.prompt_ids ? "prompt" : "messages");
      return std::nullopt;
    }
    metrics.accepted();
    return ids;
  }

  // Waits for every choice's result (a request that does not stream).
  std::vector<GenerationResult> wait_all(Channel& channel, int choices, const std::vector<RequestId>& ids) {
    std::vector<GenerationResult> results(static_cast<size_t>(choices));
    int open_choices = choices;
    while (open_choices > 0) {
      if (stopping) {
        for (const RequestId id : ids) engine->cancel(id);
      }
      for (Channel::Event& e : channel.take()) {
        if (e.result) {
          results[size_t(e.choice)] = std::move(*e.result);
          --open_choices;
        }
      }
    }
    --in_flight;
    return results;
  }

  // The first failed choice's error, or nothing.
  static std::optional<std::string> failure(const std::vector<GenerationResult>& results) {
    for (const GenerationResult& r : results) {
      if (!r.error.empty()) return r.error;
    }
    return std::nullopt;
  }

  // Renders a chat request's prompt with its tools; how its replies are read.
  // ApiError for what the template cannot serve; nt::Error for a conversation it refuses.
  std::optional<ReplyReading> plan(EngineRequest& r, const ToolRequest& tools) {
    ChatPlan plan = plan_chat(engine->chat_template(), engine->tokenizer(), r.messages, tools, o.reasoning_inline);
    r.chat_prompt = std::move(plan.prompt);
    r.kept_special = std::move(plan.kept_special);
    return std::move(plan.reading);
  }

  void openai(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    if (refuse_when_not_ready(res, Dialect::OpenAi)) return;
    ApiRequest api;
    try {
      api = parse_api_request(endpoint, req.body, o.model_id, o.sampling, o.max_tokens);
      if (!api.prediction.empty()) api.request.prediction = engine->tokenizer().encode(api.prediction, false);
      if (endpoint == Endpoint::ChatCompletions) api.reading = plan(api.request, api.tools);
    } catch (const ApiError& e) {
      metrics.rejected();
      return send_error(res, Dialect::OpenAi, e.status, e.what(), e.param, e.type);
    } catch (const Error& e) {  // a conversation the template cannot render
      metrics.rejected();
      return send_error(res, Dialect::OpenAi, 400, e.what(), "messages");
    }
    const auto channel = std::make_shared<Channel>();
    const std::string id = reply_id(endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl");
    api.request.name = id;
    const auto ids = submit(api.request, api.choices, api.seeded, channel, res, Dialect::OpenAi);
    if (!ids) return;
    const int64_t created = unix_seconds();
    if (!api.stream) {
      const std::vector<GenerationResult> results = wait_all(*channel, api.choices, *ids);
      if (const auto error = failure(results)) return send_error(res, Dialect::OpenAi, 400, *error);
      return send_json(res, completion_body(api, id, created, results, engine->tokenizer()));
    }
    std::deque<Channel::Event> first = first_events(*channel, *ids);
    if (api.choices == 1 && first.front().result && !first.front().result->error.empty()) {
      --in_flight;
      return send_error(res, Dialect::OpenAi, 400, first.front().result->error);
    }
    channel->put_back(std::move(first));
    stream_openai(api, id, created, channel, *ids, res);
  }

  void stream_openai(const ApiRequest& api, const std::string& id, int64_t created, const std::shared_ptr<Channel>& channel,
                     const std::vector<RequestId>& ids, httplib::Response& res) {
    struct State {
      std::vector<ChoiceStream> choices;
      int open_choices = 0;
      int64_t prompt = 0, completion = 0, cached = 0;
      bool closed = false;
    };
    auto state = std::make_shared<State>();
    for (int i = 0; i < api.choices; ++i) state->choices.emplace_back(api, id, created, i, engine->tokenizer());
    state->open_choices = api.choices;
    const auto cancel_all = [this, ids] {
      for (const RequestId rid : ids) engine->cancel(rid);
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, api, id, created, channel, state, cancel_all](size_t, httplib::DataSink& sink) {
          if (stopping) cancel_all();
          std::string out;
          for (Channel::Event& e : channel->take()) {
            ChoiceStream& choice = state->choices[size_t(e.choice)];
            for (const json& chunk : choice.text(e.text, e.logprobs)) out += sse(chunk);
            if (e.result) {
              const GenerationResult& r = *e.result;
              for (const json& chunk : choice.finish(r)) out += sse(chunk);
              if (!r.error.empty()) out += sse(error_body(400, r.error));
              state->prompt = r.prompt_tokens;
              state->completion += r.completion_tokens;
              state->cached = std::max(state->cached, r.shared_prompt_tokens);
              --state->open_choices;
            }
          }
          if (state->open_choices == 0) {
            if (api.include_usage) {
              out += sse(usage_chunk_body(api, id, created, usage_json(state->prompt, state->completion, state->cached)));
            }
            out += "data: [DONE]\n\n";
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            cancel_all();  // the client went away
            return false;
          }
          if (state->open_choices == 0) {
            state->closed = true;
            sink.done();
          }
          return true;
        },
        [this, state, cancel_all](bool) {
          // However the stream ended, nothing of it runs on.
          if (!state->closed) cancel_all();
          --in_flight;
        });
  }

  void anthropic(const httplib::Request& req, httplib::Response& res) {
    if (refuse_when_not_ready(res, Dialect::Anthropic)) return;
    MessagesRequest m;
    try {
      m = parse_messages_request(req.body, o.model_id, o.sampling);
      m.reading = plan(m.request, m.tools);
    } catch (const ApiError& e) {
      metrics.rejected();
      return send_error(res, Dialect::Anthropic, e.status, e.what());
    } catch (const Error& e) {
      metrics.rejected();
      return send_error(res, Dialect::Anthropic, 400, e.what());
    }
    const auto channel = std::make_shared<Channel>();
    const std::string id = reply_id("msg");
    m.request.name = id;
    const auto ids = submit(m.request, 1, false, channel, res, Dialect::Anthropic);
    if (!ids) return;
    if (!m.stream) {
      const std::vector<GenerationResult> results = wait_all(*channel, 1, *ids);
      if (const auto error = failure(results)) return send_error(res, Dialect::Anthropic, 400, *error);
      return send_json(res, message_body(m, id, results[0]));
    }
    std::deque<Channel::Event> first = first_events(*channel, *ids);
    if (first.front().result && !first.front().result->error.empty()) {
      --in_flight;
      return send_error(res, Dialect::Anthropic, 400, first.front().result->error);
    }
    channel->put_back(std::move(first));
    auto started = std::make_shared<bool>(false);
    auto closed = std::make_shared<bool>(false);
    auto stream = std::make_shared<MessageStream>(m, id);
    const RequestId rid = (*ids)[0];
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream, channel, started, closed, rid](size_t, httplib::DataSink& sink) {
          if (stopping) engine->cancel(rid);
          std::string out;
          bool done = false;
          for (Channel::Event& e : channel->take()) {
            if (!*started) {
              // The prompt's length is known only with the result; the start event reports 0 until then.
              out += stream->start(e.result ? e.result->prompt_tokens : 0);
              *started = true;
            }
            out += stream->text(e.text);
            if (e.result) {
              out += stream->finish(*e.result);
              done = true;
            }
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            engine->cancel(rid);
            return false;
          }
          if (done) {
            *closed = true;
            sink.done();
          }
          return true;
        },
        [this, closed, rid](bool) {
          if (!*closed) engine->cancel(rid);
          --in_flight;
        });
  }

  void routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      metrics.http_request();
      // The page holds no data: it asks for the key and sends it with its own requests.
      const bool open_path = req.path == "/health" || (req.path == "/" && req.method == "GET");
      if (o.api_key.empty() || open_path) return httplib::Server::HandlerResponse::Unhandled;
      std::string given = req.get_header_value("x-api-key");
      const std::string bearer = req.get_header_value("Authorization");
      if (bearer.rfind("Bearer ", 0) == 0) given = bearer.substr(7);
      if (same_secret(given, o.api_key)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, req.path == "/v1/messages" ? Dialect::Anthropic : Dialect::OpenAi, 401,
                 "missing or wrong API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'", {},
                 "authentication_error");
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      const Dialect dialect = req.path == "/v1/messages" ? Dialect::Anthropic : Dialect::OpenAi;
      const std::string message = res.status == 404   ? fmt::format("no route {} {}", req.method, req.path)
                                  : res.status == 413 ? "the request body is too large"
                                  : res.status == 405 ? fmt::format("{} is not allowed on {}", req.method, req.path)
                                                      : fmt::format("HTTP error {}", res.status);
      send_error(res, dialect, res.status, message, {}, res.status == 404 ? "not_found_error" : "invalid_request_error");
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
      std::string message = "internal error";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        message = e.what();
      } catch (...) {
      }
      send_error(res, req.path == "/v1/messages" ? Dialect::Anthropic : Dialect::OpenAi, 500, message, {}, "server_error");
    });

    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (!ready) {
        res.status = 503;
        res.set_header("Retry-After", "1");
        return send_json(res, {{"status", "loading model"}});
      }
      send_json(res, {{"status", "ok"}});
    });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(web_page().data(), web_page().size(), "text/html; charset=utf-8");
    });
    http.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
      if (refuse_when_not_ready(res, Dialect::OpenAi)) return;
      send_json(res, props);
    });
    http.Get("/slots", [this](const httplib::Request& req, httplib::Response& res) {
      if (refuse_when_not_ready(res, Dialect::OpenAi)) return;
      const EngineStats stats = engine->stats();
      const bool none_idle = std::all_of(stats.slots.begin(), stats.slots.end(),
                                         [](const EngineSlot& s) { return s.state.busy; });
      if (req.get_param_value("fail_on_no_slot") == "1" && none_idle) {
        return send_error(res, Dialect::OpenAi, 503, "no slot is idle", {}, "unavailable_error");
      }
      send_json(res, slots_json(stats, context));
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, {{"object", "list"},
                      {"data", json::array({{{"id", o.model_id}, {"object", "model"}, {"created", 0},
                                             {"owned_by", "ntransformer"}}})}});
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      openai(Endpoint::ChatCompletions, req, res);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      openai(Endpoint::Completions, req, res);
    });
    http.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) { anthropic(req, res); });
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
    http.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) { apply_template(req, res); });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const EngineStats stats = ready ? engine->stats() : EngineStats{};
      res.set_content(metrics.prometheus_text(ready ? &stats : nullptr, o.slots), "text/plain; version=0.0.4");
    });
  }

  // {"content": "...", "add_special": true} -> {"tokens": [...]}, as the reference server.
  void tokenize(const httplib::Request& req, httplib::Response& res) {
    if (refuse_when_not_ready(res, Dialect::OpenAi)) return;
    const json j = json::parse(req.body, nullptr, false);
    if (!j.is_object() || !j.contains("content") || !j["content"].is_string()) {
      return send_error(res, Dialect::OpenAi, 400, "content: expected a string", "content");
    }
    const bool add_special = j.value("add_special", false);
    send_json(res, {{"tokens", engine->tokenizer().encode(j["content"].get<std::string>(), add_special)}});
  }

  // {"tokens": [...]} -> {"content": "..."}.
  void detokenize(const httplib::Request& req, httplib::Response& res) {
    if (refuse_when_not_ready(res, Dialect::OpenAi)) return;
    const json j = json::parse(req.body, nullptr, false);
    if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
      return send_error(res, Dialect::OpenAi, 400, "tokens: expected a list of token ids", "tokens");
    }
    const int64_t vocab = engine->tokenizer().vocab().size();
    std::string text;
    for (size_t i = 0; i < j["tokens"].size(); ++i) {
      const json& t = j["tokens"][i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
        return send_error(res, Dialect::OpenAi, 400,
                          fmt::format("tokens[{}]: expected a token id from 0 to {}, got {}", i, vocab - 1, t.dump()),
                          fmt::format("tokens[{}]", i));
      }
      text += engine->tokenizer().token_bytes(int32_t(t.get<int64_t>()));
    }
    send_json(res, {{"content", text}});
  }

  // {"messages": [...]} -> {"prompt": "..."}: the rendered chat template.
  void apply_template(const httplib::Request& req, httplib::Response& res) {
    if (refuse_when_not_ready(res, Dialect::OpenAi)) return;
    try {
      ApiRequest api = parse_api_request(Endpoint::ChatCompletions, req.body, o.model_id, o.sampling, o.max_tokens);
      plan(api.request, api.tools);
      send_json(res, {{"prompt", *api.request.chat_prompt}});
    } catch (const ApiError& e) {
      send_error(res, Dialect::OpenAi, e.status, e.what(), e.param);
    } catch (const Error& e) {
      send_error(res, Dialect::OpenAi, 400, e.what(), "messages");
    }
  }
};

Server::Server(ServerOptions options, std::function<std::unique_ptr<Engine>()> open) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  impl_->open = std::move(open);
  Impl& s = *impl_;
  // Every streaming client holds an HTTP thread while its reply runs.
  const size_t threads = size_t(std::max(16, 2 * (s.o.slots + s.o.max_waiting)));
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(s.o.max_body_bytes);
  s.http.set_keep_alive_timeout(5);
  s.routes();
}

Server::~Server() { stop(); }

void Server::run(const std::function<void(const std::string&)>& on_listening) {
  Impl& s = *impl_;
  if (s.o.port == 0) {
    port_ = s.http.bind_to_any_port(s.o.host);
    if (port_ < 0) fail("serve: cannot listen on {}: no free port", s.o.host);
  } else {
    if (!s.http.bind_to_port(s.o.host, s.o.port)) {
      fail("serve: cannot listen on {}:{} (in use, or not an address of this machine)", s.o.host, s.o.port);
    }
    port_ = s.o.port;
  }
  std::thread listener([&s] { s.http.listen_after_bind(); });
  if (on_listening) on_listening(fmt::format("http://{}:{}", s.o.host, port_.load()));
  try {
    s.engine = s.open();
    s.props = props_json(*s.engine, s.o);
    s.context = s.engine->model().runner->context_size();
  } catch (...) {
    s.http.stop();
    listener.join();
    throw;
  }
  s.ready = true;
  while (!s.stopping) {
    const bool busy = s.engine->step();
    if (!busy && !s.stopping) s.engine->wait_for_work();
  }
  // The HTTP threads still waiting cancel their requests; the engine steps
  // until they have their answers and the listener has let them all go.
  s.http.stop();
  std::atomic<bool> listener_done{false};
  std::thread closer([&] {
    listener.join();
    listener_done = true;
    s.engine->wake();
  });
  while (!listener_done) {
    if (!s.engine->step() && !listener_done) s.engine->wait_for_work();
  }
  closer.join();
}

void Server::stop() {
  Impl& s = *impl_;
  s.stopping = true;
  if (s.engine) s.engine->wake();
  s.http.stop();
}

}  // namespace nt::server
