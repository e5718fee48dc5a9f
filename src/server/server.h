// `ntransformer serve`: the OpenAI (/v1/chat/completions, /v1/completions,
// /v1/models) and Anthropic (/v1/messages) HTTP APIs over the engine facade,
// with /health, /tokenize, /detokenize, /apply-template, /metrics, /props
// (the model and its placement), /slots (each sequence slot's request) and
// a chat page at /.
//
// HTTP threads parse and check each request, hand it to the engine thread
// through Engine::submit, and wait on the request's own channel for its text
// and result; the engine thread runs one batched pass per step over every
// active request. A client that goes away mid-stream cancels its request,
// which frees its sequence at the next step. It listens before the model
// loads: /health answers 503 until it is ready.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"

namespace nt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (port() tells which)
  std::string api_key;              // empty: none asked
  std::string model_id;             // the name clients give as "model"
  SamplingParams sampling;          // for fields a request leaves out
  int64_t max_tokens = kNoTokenLimit;  // for requests without max_tokens (-n)
  size_t max_body_bytes = 16 << 20;
  int max_waiting = 64;             // requests waiting beyond the slots; past it 503
  int slots = 1;                    // sequences decoded at once (-np)
  bool reasoning_inline = false;    // reasoning stays in the content (--reasoning-format none)
};

class Server {
 public:
  // `open` loads the engine; it runs on the thread that calls run().
  Server(ServerOptions options, std::function<std::unique_ptr<Engine>()> open);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds (nt::Error naming the address when it cannot), prints the address,
  // loads the model while /health says 503, then serves until stop().
  void run(const std::function<void(const std::string& address)>& on_listening);
  // From any thread: stops taking connections, cancels what runs, returns run().
  void stop();
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<int> port_{0};
};

}  // namespace nt::server
