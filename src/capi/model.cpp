// The C API's models and text: opening a file (shape, vocabulary, chat
// template), tokens to and from text, conversations through the template,
// and the placement plan as JSON.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "capi/api_guard.h"
#include "capi/handles.h"
#include "core/error.h"
#include "model/model_weights.h"
#include "planning/device_memory_plan.h"
#include "runtime/kernel_shapes.h"
#include "storage/host_memory.h"
#include "storage/io_reader.h"
#include "storage/layer_reads.h"

#ifndef NT_VERSION_STRING
#define NT_VERSION_STRING "0.0.0"
#endif

using nt::capi::guard;
using nt::capi::need;
using nt::capi::refuse;

namespace {

const nt_model& model_arg(const nt_model* model, const char* function) { return *need(model, function, "model"); }

// A text argument of `len` bytes, or up to its NUL when len is -1.
std::string_view text_arg(const char* text, int32_t len, const char* function) {
  if (!text) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: text is NULL", function);
  if (len < -1) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: text_len {} (-1 for NUL-terminated text)", function, len);
  return len == -1 ? std::string_view(text) : std::string_view(text, size_t(len));
}

void check_token(const nt_model& m, nt_token token, const char* function) {
  if (token < 0 || token >= m.tokenizer->size()) {
    refuse(NT_STATUS_OUT_OF_RANGE, "{}: token {} is outside the vocabulary of {} tokens", function, token,
           m.tokenizer->size());
  }
}

// What the CUDA runner would place where (the code `ntransformer plan` prints from).
nlohmann::json plan_json(const nt_model& m, const nt_context_params& p) {
  constexpr uint64_t kAssumedVram = uint64_t(24) << 30;  // a 24 GiB card, as `plan` assumes without a GPU
  constexpr int kAssumedSms = 132;                        // the H200's, as `plan` assumes
  constexpr int kRingSlots = 2;
  const nt::ModelSpec& c = m.spec;
  const int64_t context = p.n_ctx > 0 ? int64_t(p.n_ctx) : nt::default_context(*m.file);
  const int64_t sequences = std::max<int64_t>(1, p.n_seq_max);
  const nt::ModelWeights weights = nt::load_model_weights(*m.file, c);
  const nt::OpenedReader opened = nt::open_file_reader(m.path, nt::ReaderOptions{});
  const std::vector<nt::LayerRead> reads = nt::plan_layer_reads(m.file->header(), opened.reader->alignment(), m.path);
  const uint64_t vram_budget = m.params.vram_budget > 0 ? m.params.vram_budget : kAssumedVram;
  const uint64_t ram_budget = m.params.ram_budget > 0
                                  ? m.params.ram_budget
                                  : nt::automatic_ram_budget(nt::host_mem_available(), c, nt::kDefaultMaxBatch).budget;
  const nt::RunnerBuffers buffers =
      nt::runner_buffers(c, weights, context, nt::kv_cache_context(context), nt::kDefaultMaxBatch, int(sequences), kAssumedSms,
                         0, true);
  const nt::DevicePlacement placed =
      nt::plan_device_placement(c, weights, reads, buffers, kRingSlots, vram_budget, ram_budget);
  const nt::PlacementPlan& plan = placed.plan;

  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < plan.layer_tier.size(); ++l) {
    layers.push_back({{"index", l},
                      {"tier", std::string(nt::tier_name(plan.layer_tier[l]))},
                      {"bytes", placed.footprint.layers[l].resident_bytes},
                      {"streamed_bytes", placed.footprint.layers[l].streamed_bytes}});
  }
  const nt::VramReserve& r = placed.request.reserve;
  return {
      {"model",
       {{"path", m.path},
        {"architecture", c.architecture},
        {"n_layers", c.n_layers},
        {"n_embd", c.dim},
        {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads},
        {"vocab_size", c.vocab_size},
        {"context_length", c.context_length}}},
      {"context", {{"n_ctx", context}, {"n_seq_max", sequences}, {"batch", nt::kDefaultMaxBatch}}},
      {"budgets",
       {{"vram", vram_budget},
        {"vram_assumed", m.params.vram_budget == 0},
        {"ram", ram_budget},
        {"ram_from_available_memory", m.params.ram_budget == 0},
        {"gpu_sms_assumed", kAssumedSms}}},
      {"layers", layers},
      {"tiers",
       {{"vram", plan.count(nt::Tier::Vram)}, {"ram", plan.count(nt::Tier::Ram)}, {"disk", plan.count(nt::Tier::Disk)}}},
      {"vram",
       {{"total", plan.vram_total()},
        {"layers", plan.vram_layers},
        {"ring", plan.vram_ring},
        {"kv_cache", r.kv_cache},
        {"activations", r.activations},
        {"logits", r.logits},
        {"gemm_scratch", r.gemm_scratch},
        {"staging", r.staging},
        {"token_embd_in_vram", plan.token_embd_in_vram}}},
      {"ram", {{"total", plan.ram_total()}, {"layers", plan.ram_layers}, {"staging", plan.ram_staging}}},
      {"bytes_streamed_per_token",
       {{"from_ram", plan.streamed_from_ram},
        {"from_disk", plan.streamed_from_disk},
        {"total", plan.streamed_from_ram + plan.streamed_from_disk}}},
  };
}

}  // namespace

extern "C" {

const char* nt_last_error(void) { return nt::capi::last_error().c_str(); }

const char* nt_status_name(nt_status status) {
  switch (nt::capi::enum_value(status)) {
    case NT_STATUS_OK: return "NT_STATUS_OK";
    case NT_STATUS_INVALID_ARGUMENT: return "NT_STATUS_INVALID_ARGUMENT";
    case NT_STATUS_OUT_OF_RANGE: return "NT_STATUS_OUT_OF_RANGE";
    case NT_STATUS_BUFFER_TOO_SMALL: return "NT_STATUS_BUFFER_TOO_SMALL";
    case NT_STATUS_INVALID_STATE: return "NT_STATUS_INVALID_STATE";
    case NT_STATUS_NOT_FOUND: return "NT_STATUS_NOT_FOUND";
    case NT_STATUS_UNSUPPORTED: return "NT_STATUS_UNSUPPORTED";
    case NT_STATUS_NO_MEMORY: return "NT_STATUS_NO_MEMORY";
    case NT_STATUS_ABORTED: return "NT_STATUS_ABORTED";
    case NT_STATUS_ENGINE_ERROR: return "NT_STATUS_ENGINE_ERROR";
    case NT_STATUS_INTERNAL_ERROR: return "NT_STATUS_INTERNAL_ERROR";
  }
  return "unknown";
}

const char* nt_version(void) {
#define NT_STRINGIFY_(x) #x
#define NT_STRINGIFY(x) NT_STRINGIFY_(x)
  return NT_VERSION_STRING " (API " NT_STRINGIFY(NT_API_VERSION) ")";
}

int32_t nt_api_version(void) { return NT_API_VERSION; }

nt_model_params nt_model_default_params(void) {
  nt_model_params p;
  std::memset(&p, 0, sizeof p);
  p.device = NT_DEVICE_AUTO;
  return p;
}

nt_status nt_model_load(const nt_model_params* params, nt_model** out) {
  return guard([&] {
    need(params, "nt_model_load", "params");
    need(out, "nt_model_load", "out");
    need(params->path, "nt_model_load", "params->path");
    const int32_t device = nt::capi::enum_value(params->device);
    if (device != NT_DEVICE_AUTO && device != NT_DEVICE_CPU && device != NT_DEVICE_CUDA) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_model_load: device {} is none of NT_DEVICE_AUTO, _CPU, _CUDA", device);
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(params->path, ec)) {
      refuse(NT_STATUS_NOT_FOUND, "nt_model_load: {}: no such file", params->path);
    }
    auto m = std::make_unique<nt_model>();
    m->params = *params;
    m->path = params->path;
    m->params.path = nullptr;  // the caller's string may go; m->path is the copy
    m->file = nt::GgufFile::open(m->path);
    m->spec = nt::read_model_spec(m->file->header(), m->path);
    m->tokenizer = std::make_unique<nt::Tokenizer>(nt::Tokenizer::from_gguf(m->file->header(), m->path));
    try {
      m->chat = nt::ChatTemplate::for_tokenizer(*m->tokenizer);
    } catch (const nt::Error&) {
      // A template the engine cannot use: chat calls say why; generation still stops at EOS/EOT/EOM.
    }
    if (m->chat) {
      m->end_of_generation = nt::chat_stop_tokens(*m->tokenizer, *m->chat);
    } else {
      const nt::Vocabulary& v = m->tokenizer->vocab();
      for (int32_t id : {v.eos(), v.eot(), v.eom()}) {
        if (v.contains(id)) m->end_of_generation.push_back(id);
      }
      std::sort(m->end_of_generation.begin(), m->end_of_generation.end());
    }
    *out = m.release();
    return NT_STATUS_OK;
  });
}

nt_status nt_model_free(nt_model* model) {
  return guard([&] {
    if (!model) return NT_STATUS_OK;
    if (const int live = model->contexts.load(); live > 0) {
      refuse(NT_STATUS_INVALID_STATE, "nt_model_free: {} context(s) made from the model are still alive; free them first",
             live);
    }
    delete model;
    return NT_STATUS_OK;
  });
}

nt_status nt_vocab_size(const nt_model* model, int32_t* out) {
  return guard([&] {
    *need(out, "nt_vocab_size", "out") = model_arg(model, "nt_vocab_size").tokenizer->size();
    return NT_STATUS_OK;
  });
}

nt_status nt_model_n_layers(const nt_model* model, int32_t* out) {
  return guard([&] {
    *need(out, "nt_model_n_layers", "out") = int32_t(model_arg(model, "nt_model_n_layers").spec.n_layers);
    return NT_STATUS_OK;
  });
}

nt_status nt_model_n_embd(const nt_model* model, int32_t* out) {
  return guard([&] {
    *need(out, "nt_model_n_embd", "out") = int32_t(model_arg(model, "nt_model_n_embd").spec.dim);
    return NT_STATUS_OK;
  });
}

nt_status nt_model_n_ctx_train(const nt_model* model, int32_t* out) {
  return guard([&] {
    const int64_t n = model_arg(model, "nt_model_n_ctx_train").spec.context_length;
    *need(out, "nt_model_n_ctx_train", "out") = int32_t(std::min<int64_t>(n, INT32_MAX));
    return NT_STATUS_OK;
  });
}

nt_status nt_token_bos(const nt_model* model, nt_token* out) {
  return guard([&] {
    const nt::Vocabulary& v = model_arg(model, "nt_token_bos").tokenizer->vocab();
    *need(out, "nt_token_bos", "out") = v.contains(v.bos()) ? v.bos() : -1;
    return NT_STATUS_OK;
  });
}

nt_status nt_token_eos(const nt_model* model, nt_token* out) {
  return guard([&] {
    const nt::Vocabulary& v = model_arg(model, "nt_token_eos").tokenizer->vocab();
    *need(out, "nt_token_eos", "out") = v.contains(v.eos()) ? v.eos() : -1;
    return NT_STATUS_OK;
  });
}

nt_status nt_token_is_eog(const nt_model* model, nt_token token, bool* out) {
  return guard([&] {
    const nt_model& m = model_arg(model, "nt_token_is_eog");
    need(out, "nt_token_is_eog", "out");
    check_token(m, token, "nt_token_is_eog");
    *out = std::binary_search(m.end_of_generation.begin(), m.end_of_generation.end(), token);
    return NT_STATUS_OK;
  });
}

nt_status nt_tokenize(const nt_model* model, const char* text, int32_t text_len, nt_token* tokens, int32_t n_tokens_max,
                      bool add_special, bool parse_special, int32_t* n_tokens) {
  return guard([&] {
    const nt_model& m = model_arg(model, "nt_tokenize");
    need(n_tokens, "nt_tokenize", "n_tokens");
    const std::string_view t = text_arg(text, text_len, "nt_tokenize");
    if (n_tokens_max < 0) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_tokenize: n_tokens_max {} is negative", n_tokens_max);
    if (!tokens && n_tokens_max > 0) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_tokenize: tokens is NULL but n_tokens_max is {}", n_tokens_max);
    }
    const std::vector<int32_t> ids = m.tokenizer->encode(t, add_special, parse_special);
    if (ids.size() > size_t(INT32_MAX)) refuse(NT_STATUS_UNSUPPORTED, "nt_tokenize: over 2^31 tokens");
    if (int64_t(ids.size()) > n_tokens_max) {
      *n_tokens = -int32_t(ids.size());
      refuse(NT_STATUS_BUFFER_TOO_SMALL, "nt_tokenize: the text is {} tokens, the buffer holds {}", ids.size(),
             n_tokens_max);
    }
    std::copy(ids.begin(), ids.end(), tokens);
    *n_tokens = int32_t(ids.size());
    return NT_STATUS_OK;
  });
}

nt_status nt_token_to_piece(const nt_model* model, nt_token token, bool special, char* buf, int32_t buf_size,
                            int32_t* n_bytes) {
  return guard([&] {
    const nt_model& m = model_arg(model, "nt_token_to_piece");
    need(n_bytes, "nt_token_to_piece", "n_bytes");
    check_token(m, token, "nt_token_to_piece");
    if (buf_size < 0) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_token_to_piece: buf_size {} is negative", buf_size);
    if (!buf && buf_size > 0) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_token_to_piece: buf is NULL but buf_size is {}", buf_size);
    }
    const std::string piece = !special && m.tokenizer->is_special(token) ? std::string() : m.tokenizer->token_bytes(token);
    if (int64_t(piece.size()) > buf_size) {
      *n_bytes = -int32_t(piece.size());
      refuse(NT_STATUS_BUFFER_TOO_SMALL, "nt_token_to_piece: token {} is {} bytes, the buffer holds {}", token,
             piece.size(), buf_size);
    }
    if (!piece.empty()) std::memcpy(buf, piece.data(), piece.size());
    *n_bytes = int32_t(piece.size());
    return NT_STATUS_OK;
  });
}

nt_status nt_chat_apply_template(const nt_model* model, const char* tmpl, const nt_chat_message* messages,
                                 size_t n_messages, bool add_assistant, char* buf, int32_t buf_size, int32_t* n_bytes) {
  return guard([&] {
    const nt_model& m = model_arg(model, "nt_chat_apply_template");
    need(n_bytes, "nt_chat_apply_template", "n_bytes");
    if (!messages && n_messages > 0) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_chat_apply_template: messages is NULL but n_messages is {}", n_messages);
    }
    std::vector<nt::ChatMessage> conversation;
    for (size_t i = 0; i < n_messages; ++i) {
      if (!messages[i].role || !messages[i].content) {
        refuse(NT_STATUS_INVALID_ARGUMENT, "nt_chat_apply_template: message {} has a NULL {}", i,
               messages[i].role ? "content" : "role");
      }
      conversation.push_back({messages[i].role, messages[i].content});
    }
    std::optional<nt::ChatTemplate> named;
    if (tmpl) {
      try {
        named = nt::ChatTemplate::for_tokenizer(*m.tokenizer, tmpl);
      } catch (const nt::Error& e) {
        refuse(NT_STATUS_INVALID_ARGUMENT, "nt_chat_apply_template: {}", e.what());
      }
    }
    if (!named && !m.chat) {
      refuse(NT_STATUS_UNSUPPORTED, "nt_chat_apply_template: {} has a chat template the engine cannot use; name a "
             "built-in one (chatml, llama3, llama2, plain)", m.path);
    }
    const std::string text = (named ? *named : *m.chat).apply(conversation, add_assistant);
    return nt::capi::copy_text_out(text, buf, buf_size, n_bytes, "nt_chat_apply_template");
  });
}

nt_status nt_model_plan(const nt_model* model, const nt_context_params* params, char* buf, int32_t buf_size,
                        int32_t* n_bytes) {
  return guard([&] {
    const nt_model& m = model_arg(model, "nt_model_plan");
    need(n_bytes, "nt_model_plan", "n_bytes");
    const nt_context_params p = params ? *params : nt_context_default_params();
    return nt::capi::copy_text_out(plan_json(m, p).dump(), buf, buf_size, n_bytes, "nt_model_plan");
  });
}

}  // extern "C"
