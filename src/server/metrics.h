// The server's counters, as Prometheus text for GET /metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "engine/engine.h"

namespace nt::server {

class Metrics {
 public:
  void http_request() { ++http_requests_; }
  void accepted() { ++accepted_; }
  void rejected() { ++rejected_; }  // a malformed or out-of-range request (400, 404)
  void refused() { ++refused_; }    // the queue was full (503)
  void finished(const GenerationResult& r);

  // `stats` null while the model loads.
  std::string prometheus_text(const EngineStats* stats, int slots) const;

 private:
  std::atomic<int64_t> http_requests_{0}, accepted_{0}, rejected_{0}, refused_{0}, finished_{0}, failed_{0};
  std::atomic<int64_t> prompt_tokens_{0}, cached_tokens_{0}, completion_tokens_{0};
};

}  // namespace nt::server
