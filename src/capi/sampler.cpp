// The C API's sampling chains: steps added in the engine's order fill one
// SamplingParams, and the engine's Sampler picks from a row of the last
// pass's logits, exactly as `run` does with the same settings.
#include <cmath>

#include "capi/api_guard.h"
#include "capi/context_internal.h"
#include "capi/handles.h"
#include "sampling/setting_limits.h"

using nt::capi::guard;
using nt::capi::need;
using nt::capi::refuse;

namespace {

// The engine's chain order; a step may follow only the steps before it.
enum Stage { kNone = 0, kPenalties, kTopK, kTopP, kMinP, kTemperature };
constexpr const char* kStageNames[] = {"", "penalties", "top_k", "top_p", "min_p", "temp"};

nt_sampler& add_step(nt_sampler* chain, Stage stage, const char* function) {
  nt_sampler& s = *need(chain, function, "chain");
  if (s.ends) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: the chain already ends with dist or greedy", function);
  if (stage != kNone && s.stage >= stage) {
    refuse(NT_STATUS_INVALID_ARGUMENT, "{}: {} cannot follow {}: a chain runs penalties, top_k, top_p, min_p, temp, then "
           "dist or greedy, each at most once", function, kStageNames[stage], kStageNames[s.stage]);
  }
  if (s.sampler) refuse(NT_STATUS_INVALID_STATE, "{}: the chain has sampled already", function);
  if (stage != kNone) s.stage = stage;
  return s;
}

void check(const nt::SettingLimit& limit, double value, const char* function) {
  const std::string why = nt::check_limit(limit, value);
  if (!why.empty()) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: {} {}", function, limit.field, why);
}

}  // namespace

extern "C" {

nt_status nt_sampler_chain_new(nt_sampler** out) {
  return guard([&] {
    need(out, "nt_sampler_chain_new", "out");
    auto s = std::make_unique<nt_sampler>();
    // Every filter off until added; a plain dist draws at temperature 1.
    s->params.temperature = 1.0f;
    s->params.top_k = 0;
    s->params.top_p = 1.0f;
    s->params.min_p = 0.0f;
    s->params.repeat_penalty = 1.0f;
    s->params.frequency_penalty = 0.0f;
    s->params.presence_penalty = 0.0f;
    *out = s.release();
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_chain_add_penalties(nt_sampler* chain, int32_t last_n, float repeat, float frequency, float presence) {
  return guard([&] {
    const char* f = "nt_sampler_chain_add_penalties";
    check(nt::limits::kRepeatLastN, last_n, f);
    check(nt::limits::kRepeatPenalty, repeat, f);
    check(nt::limits::kFrequencyPenalty, frequency, f);
    check(nt::limits::kPresencePenalty, presence, f);
    nt_sampler& s = add_step(chain, kPenalties, f);
    s.params.repeat_last_n = last_n;
    s.params.repeat_penalty = repeat;
    s.params.frequency_penalty = frequency;
    s.params.presence_penalty = presence;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_chain_add_top_k(nt_sampler* chain, int32_t k) {
  return guard([&] {
    add_step(chain, kTopK, "nt_sampler_chain_add_top_k").params.top_k = k < 0 ? 0 : k;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_chain_add_top_p(nt_sampler* chain, float p) {
  return guard([&] {
    check(nt::limits::kTopP, p, "nt_sampler_chain_add_top_p");
    add_step(chain, kTopP, "nt_sampler_chain_add_top_p").params.top_p = p;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_chain_add_min_p(nt_sampler* chain, float p) {
  return guard([&] {
    check(nt::limits::kMinP, p, "nt_sampler_chain_add_min_p");
    add_step(chain, kMinP, "nt_sampler_chain_add_min_p").params.min_p = p;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_chain_add_temp(nt_sampler* chain, float t) {
  return guard([&] {
    if (std::isnan(t)) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_sampler_chain_add_temp: temperature is NaN");
    add_step(chain, kTemperature, "nt_sampler_chain_add_temp").params.temperature = t;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_chain_add_dist(nt_sampler* chain, uint64_t seed) {
  return guard([&] {
    nt_sampler& s = add_step(chain, kNone, "nt_sampler_chain_add_dist");
    s.params.seed = seed;
    s.ends = true;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_chain_add_greedy(nt_sampler* chain) {
  return guard([&] {
    nt_sampler& s = add_step(chain, kNone, "nt_sampler_chain_add_greedy");
    s.params.temperature = 0.0f;  // the highest logit after the penalties
    s.ends = true;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_sample(nt_sampler* chain, nt_context* ctx, int32_t i, nt_token* out) {
  return guard([&] {
    nt_sampler& s = *need(chain, "nt_sampler_sample", "chain");
    nt_context& c = nt::capi::context_arg(ctx, "nt_sampler_sample");
    need(out, "nt_sampler_sample", "out");
    if (!s.ends) refuse(NT_STATUS_INVALID_STATE, "nt_sampler_sample: the chain does not end with dist or greedy");
    const int64_t vocab = c.runner->config().vocab_size;
    const float* row = nt::capi::logits_row(c, i, "nt_sampler_sample");
    if (!s.sampler) {
      for (const int32_t t : s.history) {
        if (t >= vocab) {
          refuse(NT_STATUS_OUT_OF_RANGE, "nt_sampler_sample: accepted token {} is outside the vocabulary of {} tokens", t,
                 vocab);
        }
      }
      s.sampler.emplace(s.params, vocab);
      s.vocab_size = vocab;
      for (const int32_t t : s.history) s.sampler->accept(t);
      s.history.clear();
    } else if (s.vocab_size != vocab) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_sampler_sample: the chain sampled a vocabulary of {} tokens, this context's "
             "has {}", s.vocab_size, vocab);
    }
    s.row.assign(row, row + vocab);
    const int32_t token = s.sampler->sample(s.row);
    s.sampler->accept(token);
    *out = token;
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_accept(nt_sampler* chain, nt_token token) {
  return guard([&] {
    nt_sampler& s = *need(chain, "nt_sampler_accept", "chain");
    if (token < 0 || (s.sampler && token >= s.vocab_size)) {
      refuse(NT_STATUS_OUT_OF_RANGE, "nt_sampler_accept: token {} is outside the vocabulary", token);
    }
    if (s.sampler) {
      s.sampler->accept(token);
    } else {
      s.history.push_back(token);
    }
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_reset(nt_sampler* chain) {
  return guard([&] {
    nt_sampler& s = *need(chain, "nt_sampler_reset", "chain");
    if (s.sampler) s.sampler->reset();
    s.history.clear();
    return NT_STATUS_OK;
  });
}

nt_status nt_sampler_free(nt_sampler* chain) {
  delete chain;
  return NT_STATUS_OK;
}

}  // extern "C"
