#include "server/metrics.h"

#include <fmt/format.h>

namespace nt::server {
namespace {

void metric(std::string& out, std::string_view name, std::string_view type, std::string_view help, double value) {
  out += fmt::format("# HELP ntransformer_{0} {1}\n# TYPE ntransformer_{0} {2}\nntransformer_{0} {3}\n", name, help, type,
                     value);
}

}  // namespace

void Metrics::finished(const GenerationResult& r) {
  ++finished_;
  if (!r.error.empty()) ++failed_;
  prompt_tokens_ += r.prompt_tokens;
  cached_tokens_ += r.shared_prompt_tokens;
  completion_tokens_ += r.completion_tokens;
}

std::string Metrics::prometheus_text(const EngineStats* stats, int slots) const {
  std::string out;
  metric(out, "http_requests_total", "counter", "HTTP requests received", double(http_requests_));
  metric(out, "requests_total", "counter", "Generation requests accepted (a choice of n counts once)", double(accepted_));
  metric(out, "requests_rejected_total", "counter", "Requests refused as malformed or out of range", double(rejected_));
  metric(out, "requests_refused_full_total", "counter", "Requests refused with 503 because the queue was full",
         double(refused_));
  metric(out, "generations_finished_total", "counter", "Generations (choices) finished", double(finished_));
  metric(out, "generations_failed_total", "counter", "Generations that ended with an error", double(failed_));
  metric(out, "prompt_tokens_total", "counter", "Prompt tokens of finished generations", double(prompt_tokens_));
  metric(out, "prompt_tokens_cached_total", "counter",
         "Of them, taken from the prefix cache (another request's or a slot's kept prompt) instead of evaluated",
         double(cached_tokens_));
  metric(out, "completion_tokens_total", "counter", "Tokens generated", double(completion_tokens_));
  metric(out, "slots", "gauge", "Sequences decoded at once at most (-np)", slots);
  metric(out, "model_ready", "gauge", "1 once the model has loaded", stats ? 1 : 0);
  if (!stats) return out;
  const SchedulerProgress& p = stats->progress;
  metric(out, "requests_running", "gauge", "Generations holding a slot", double(p.running));
  metric(out, "requests_waiting", "gauge", "Generations waiting for a slot or the next step",
         double(p.requests - p.finished - p.running + stats->queued));
  metric(out, "batch_sequences_max", "gauge", "The most generations one pass has decoded together",
         double(stats->most_running));
  metric(out, "kv_pool_pages", "gauge", "Pages of the KV pool", double(stats->kv_pages));
  metric(out, "kv_pool_pages_used", "gauge", "Pages of the KV pool held (finished prompts' kept for the prefix cache too)",
         double(stats->kv_pages - stats->kv_pages_free));
  if (stats->kv_window_pages > 0) {
    metric(out, "kv_window_pool_pages", "gauge", "Pages of the sliding-window layers' KV pool", double(stats->kv_window_pages));
    metric(out, "kv_window_pool_pages_used", "gauge", "Pages of the sliding-window layers' KV pool held",
           double(stats->kv_window_pages - stats->kv_window_pages_free));
  }
  metric(out, "weight_bytes_per_pass", "gauge", "Bytes of weights one pass reads; streamed layers cross the link",
         double(stats->weight_bytes_per_token));
  if (stats->experts.uses > 0) {
    metric(out, "expert_uses_total", "counter", "Tokens' choices of an expert in a layer, where experts are cached",
           double(stats->experts.uses));
    metric(out, "expert_uses_in_vram_total", "counter", "Of them, served by an expert in VRAM",
           double(stats->experts.in_vram));
    metric(out, "expert_uses_on_cpu_total", "counter", "Of them, computed by the CPU in place of a copy",
           double(stats->experts.on_cpu));
    metric(out, "expert_copied_bytes_total", "counter", "Bytes of experts copied into VRAM for the others",
           double(stats->experts.copied_bytes));
  }
  metric(out, "passes_total", "counter", "Forward passes run", double(p.passes));
  metric(out, "prefill_tokens_per_second", "gauge", "Prompt tokens evaluated per second of the passes that did",
         p.prefill_seconds > 0 ? double(p.prompt_tokens) / p.prefill_seconds : 0.0);
  metric(out, "decode_tokens_per_second", "gauge", "Tokens generated per second of the passes that decoded",
         p.decode_seconds > 0 ? double(p.generated_tokens) / p.decode_seconds : 0.0);
  metric(out, "drafts_accepted_total", "counter", "Speculative drafted tokens accepted", double(p.speculation.accepted));
  metric(out, "drafts_total", "counter", "Speculative tokens drafted", double(p.speculation.drafted));
  return out;
}

}  // namespace nt::server
