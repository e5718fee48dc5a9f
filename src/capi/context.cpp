// The C API's contexts and the batch API: a runner from open_model, the C
// sequence ids over its sequences, nt_decode as one ModelRunner::forward
// over a Batch, and the sequence operations over the runner's KV pages.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <span>

#include "capi/api_guard.h"
#include "capi/context_internal.h"
#include "capi/handles.h"
#include "core/error.h"

using nt::capi::guard;
using nt::capi::need;
using nt::capi::refuse;

namespace nt::capi {

const nt_context& context_arg(const nt_context* ctx, const char* function) {
  const nt_context& c = *need(ctx, function, "ctx");
  if (c.broken) refuse(NT_STATUS_INVALID_STATE, "{}: the context lost its model when requests failed to start; free it", function);
  return c;
}

nt_context& context_arg(nt_context* ctx, const char* function) {
  return const_cast<nt_context&>(context_arg(static_cast<const nt_context*>(ctx), function));
}

void check_batch_mode(const nt_context& ctx, const char* function) {
  if (ctx.engine) {
    refuse(NT_STATUS_INVALID_STATE, "{}: this context serves requests (nt_request_submit); make another context for the "
           "batch API", function);
  }
}

void check_seq(const nt_context& ctx, nt_seq_id seq, const char* function) {
  if (seq < 0 || seq >= nt_seq_id(ctx.params.n_seq_max)) {
    refuse(NT_STATUS_OUT_OF_RANGE, "{}: sequence {} is outside 0..{} (n_seq_max {})", function, seq,
           int64_t(ctx.params.n_seq_max) - 1, ctx.params.n_seq_max);
  }
}

void forget_outputs(nt_context& ctx) {
  ctx.has_outputs = false;
  ctx.entry_row.clear();
  ctx.last_logits_entry = -1;
}

void truncate_seq(nt_context& ctx, nt_seq_id seq, int64_t length) {
  ctx.runner->seq_truncate(ctx.sequences[size_t(seq)], length);
  auto& tokens = ctx.tokens[size_t(seq)];
  if (int64_t(tokens.size()) > length) tokens.resize(size_t(length));
}

void sync_tokens(nt_context& ctx) {
  for (size_t s = 0; s < ctx.sequences.size(); ++s) {
    const int64_t length = ctx.runner->seq_length(ctx.sequences[s]);
    if (int64_t(ctx.tokens[s].size()) > length) ctx.tokens[s].resize(size_t(length));
  }
}

void run_pass(nt_context& ctx, const nt::Batch& batch, nt::BatchOutputs& out) {
  const nt_model_params& mp = ctx.model->params;
  if (mp.abort_callback && mp.abort_callback(mp.abort_user_data)) {
    refuse(NT_STATUS_ABORTED, "the abort callback stopped the pass before it ran");
  }
  const auto start = std::chrono::steady_clock::now();
  ctx.runner->forward(batch, out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::lock_guard lock(ctx.counters_mutex);
  ++ctx.passes;
  ctx.decoded += int64_t(batch.size());
  ctx.seconds += seconds;
}

const float* logits_row(nt_context& ctx, int32_t i, const char* function) {
  if (!ctx.has_outputs) refuse(NT_STATUS_INVALID_STATE, "{}: no logits: the last nt_decode did not run", function);
  int64_t entry = i;
  if (i == -1) {
    entry = ctx.last_logits_entry;
    if (entry < 0) refuse(NT_STATUS_INVALID_STATE, "{}: no entry of the last nt_decode asked for logits", function);
  } else if (i < 0 || i >= int64_t(ctx.entry_row.size())) {
    refuse(NT_STATUS_OUT_OF_RANGE, "{}: entry {} is outside the last batch of {} entries (-1: the last with logits)",
           function, i, ctx.entry_row.size());
  }
  const int64_t row = ctx.entry_row[size_t(entry)];
  if (row < 0) refuse(NT_STATUS_INVALID_STATE, "{}: entry {} of the last batch did not ask for logits", function, entry);
  return ctx.outputs.logits.data() + size_t(row) * size_t(ctx.runner->config().vocab_size);
}

}  // namespace nt::capi

namespace {

// A run of a batch: positions [pos, end) of a runner sequence.
struct RunSpan {
  nt::SeqId seq;
  int64_t pos, end;
};

// How many pages the KV pool lacks for the runs (0: they fit), counted as
// KvPages::write takes them: fresh pages past the kept ones; a copy of a page
// a run writes into while another sequence holds it too (when all its
// holders write into it, the last keeps it); less the pages an overwrite
// frees (those no other sequence holds).
int64_t pages_short(const nt_context& ctx, const std::vector<RunSpan>& runs) {
  const nt::KvPages& pages = ctx.runner->kv_pages();
  std::map<int32_t, int64_t> holders, writers;
  for (const nt::SeqId s : ctx.sequences) {
    for (const int32_t page : pages.pages(s)) ++holders[page];
  }
  int64_t needed = 0, freed = 0;
  for (const RunSpan& r : runs) {
    const std::span<const int32_t> held = pages.pages(r.seq);
    const int64_t kept = pages.pages_for(r.pos);
    needed += pages.pages_for(r.end) - kept;
    for (int64_t i = kept; i < int64_t(held.size()); ++i) freed += holders[held[size_t(i)]] == 1 ? 1 : 0;
    if (r.pos % pages.page_size() != 0) ++writers[held[size_t(kept - 1)]];
  }
  for (const auto& [page, count] : writers) {
    const int64_t h = holders[page];
    if (h > 1) needed += count < h ? count : count - 1;
  }
  return std::max<int64_t>(0, needed - freed - pages.free_pages());
}

}  // namespace

using namespace nt::capi;

extern "C" {

nt_context_params nt_context_default_params(void) {
  nt_context_params p;
  std::memset(&p, 0, sizeof p);
  p.n_ctx = 0;
  p.n_seq_max = 1;
  p.n_batch = 512;
  p.kv_type = NT_KV_F16;
  p.n_threads = 0;
  return p;
}

nt_status nt_context_new(nt_model* model, const nt_context_params* params, nt_context** out) {
  return guard([&] {
    need(model, "nt_context_new", "model");
    need(params, "nt_context_new", "params");
    need(out, "nt_context_new", "out");
    const nt_context_params& p = *params;
    if (p.n_seq_max < 1 || p.n_seq_max > 4096) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_context_new: n_seq_max {}: from 1 to 4096", p.n_seq_max);
    }
    if (p.n_batch < 1) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_context_new: n_batch 0: at least 1");
    if (p.n_ctx > uint32_t(INT32_MAX)) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_context_new: n_ctx {} is over 2^31", p.n_ctx);
    const int32_t kv_type = enum_value(p.kv_type);
    if (kv_type != NT_KV_F16 && kv_type != NT_KV_F32) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_context_new: kv_type {} is neither NT_KV_F16 nor NT_KV_F32", kv_type);
    }
    if (p.n_threads < 0) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_context_new: n_threads {} is negative", p.n_threads);
    const nt_model_params& mp = model->params;
    if (mp.abort_callback && mp.abort_callback(mp.abort_user_data)) {
      refuse(NT_STATUS_ABORTED, "nt_context_new: the abort callback stopped the load");
    }
    // By value: a runner may keep the load callback.
    const auto progress = [callback = mp.progress_callback, user = mp.progress_user_data](float fraction) {
      if (callback && !callback(fraction, user)) {
        refuse(NT_STATUS_ABORTED, "nt_context_new: the progress callback cancelled the load");
      }
    };

    nt::OpenModelOptions o;
    o.path = model->path;
    o.file = model->file;
    o.device = mp.device == NT_DEVICE_CPU ? nt::Device::Cpu : mp.device == NT_DEVICE_CUDA ? nt::Device::Cuda : nt::Device::Auto;
    o.context = p.n_ctx;
    o.sequences = int(p.n_seq_max);
    o.threads = p.n_threads;
    o.kv_f32 = p.kv_type == NT_KV_F32;
    if (mp.vram_budget > 0) o.vram_budget = mp.vram_budget;
    if (mp.ram_budget > 0) o.ram_budget = mp.ram_budget;
    o.on_load_progress = [progress](uint64_t done, uint64_t total) {
      progress(total > 0 ? float(double(done) / double(total)) : 1.0f);
    };

    auto ctx = std::make_unique<nt_context>();
    ctx->model = model;
    ctx->params = p;
    progress(0.0f);
    ctx->opened.emplace(nt::open_model(o));
    ctx->opened->runner->seq_truncate(0, 0);
    progress(1.0f);
    if (!ctx->opened->gpus.empty() && p.kv_type == NT_KV_F32) {
      refuse(NT_STATUS_UNSUPPORTED, "nt_context_new: the CUDA backend keeps an F16 KV cache (NT_KV_F32 runs on the CPU)");
    }
    ctx->runner = ctx->opened->runner.get();
    ctx->context_size = ctx->runner->context_size();
    ctx->params.n_ctx = uint32_t(ctx->context_size);
    ctx->kv_f32 = o.kv_f32;
    ctx->sequences.push_back(0);  // the runner's default sequence
    while (ctx->sequences.size() < p.n_seq_max) ctx->sequences.push_back(ctx->runner->seq_alloc());
    ctx->tokens.resize(p.n_seq_max);
    ++model->contexts;
    *out = ctx.release();
    return NT_STATUS_OK;
  });
}

nt_status nt_context_free(nt_context* ctx) {
  return guard([&] {
    if (!ctx) return NT_STATUS_OK;
    stop_requests(*ctx);
    --ctx->model->contexts;
    delete ctx;
    return NT_STATUS_OK;
  });
}

nt_status nt_n_ctx(const nt_context* ctx, uint32_t* out) {
  return guard([&] {
    *need(out, "nt_n_ctx", "out") = need(ctx, "nt_n_ctx", "ctx")->params.n_ctx;
    return NT_STATUS_OK;
  });
}

nt_status nt_n_seq_max(const nt_context* ctx, uint32_t* out) {
  return guard([&] {
    *need(out, "nt_n_seq_max", "out") = need(ctx, "nt_n_seq_max", "ctx")->params.n_seq_max;
    return NT_STATUS_OK;
  });
}

nt_status nt_context_description(const nt_context* ctx, char* buf, int32_t buf_size, int32_t* n_bytes) {
  return guard([&] {
    const nt_context& c = context_arg(ctx, "nt_context_description");
    return copy_text_out(c.runner->description(), buf, buf_size, n_bytes, "nt_context_description");
  });
}

// ---- Batches

nt_status nt_batch_init(int32_t n_tokens_max, nt_batch** out) {
  return guard([&] {
    need(out, "nt_batch_init", "out");
    if (n_tokens_max < 1) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_batch_init: n_tokens_max {}: at least 1", n_tokens_max);
    auto batch = std::make_unique<nt_batch>();
    batch->capacity = size_t(n_tokens_max);
    batch->entries.reserve(batch->capacity);
    *out = batch.release();
    return NT_STATUS_OK;
  });
}

nt_status nt_batch_free(nt_batch* batch) {
  delete batch;
  return NT_STATUS_OK;
}

nt_status nt_batch_clear(nt_batch* batch) {
  return guard([&] {
    need(batch, "nt_batch_clear", "batch")->entries.clear();
    return NT_STATUS_OK;
  });
}

nt_status nt_batch_add(nt_batch* batch, nt_token token, nt_pos pos, nt_seq_id seq, bool logits) {
  return guard([&] {
    nt_batch& b = *need(batch, "nt_batch_add", "batch");
    if (b.entries.size() >= b.capacity) {
      refuse(NT_STATUS_OUT_OF_RANGE, "nt_batch_add: the batch is full ({} entries, nt_batch_init's n_tokens_max)",
             b.capacity);
    }
    b.entries.push_back({token, pos, seq, logits});
    return NT_STATUS_OK;
  });
}

nt_status nt_batch_size(const nt_batch* batch, int32_t* out) {
  return guard([&] {
    *need(out, "nt_batch_size", "out") = int32_t(need(batch, "nt_batch_size", "batch")->entries.size());
    return NT_STATUS_OK;
  });
}

// ---- Decoding

nt_status nt_decode(nt_context* ctx_arg, const nt_batch* batch_arg) {
  return guard([&] {
    nt_context& ctx = context_arg(ctx_arg, "nt_decode");
    const nt_batch& b = *need(batch_arg, "nt_decode", "batch");
    check_batch_mode(ctx, "nt_decode");
    forget_outputs(ctx);
    const size_t n = b.entries.size();
    if (n == 0) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_decode: the batch is empty");
    if (n > ctx.params.n_batch) {
      refuse(NT_STATUS_INVALID_ARGUMENT, "nt_decode: {} entries, over the context's n_batch of {}", n, ctx.params.n_batch);
    }
    const int32_t vocab = int32_t(ctx.runner->config().vocab_size);
    for (size_t i = 0; i < n; ++i) {
      const nt_batch::Entry& e = b.entries[i];
      if (e.token < 0 || e.token >= vocab) {
        refuse(NT_STATUS_OUT_OF_RANGE, "nt_decode: entry {}: token {} is outside the vocabulary of {} tokens", i, e.token,
               vocab);
      }
      check_seq(ctx, e.seq, "nt_decode");
      if (e.pos < 0) refuse(NT_STATUS_OUT_OF_RANGE, "nt_decode: entry {}: position {} is negative", i, e.pos);
      if (e.pos >= ctx.context_size) {
        refuse(NT_STATUS_NO_MEMORY, "nt_decode: entry {}: position {} is past the context of {} positions (n_ctx)", i,
               e.pos, ctx.context_size);
      }
    }
    // Each sequence's entries in the caller's order, the sequences in order of
    // first appearance: the runner takes a sequence's entries as one run.
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::vector<int64_t> first_seen(ctx.params.n_seq_max, -1);
    for (size_t i = 0; i < n; ++i) {
      auto& f = first_seen[size_t(b.entries[i].seq)];
      if (f < 0) f = int64_t(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t c) {
      return first_seen[size_t(b.entries[a].seq)] < first_seen[size_t(b.entries[c].seq)];
    });
    // Each run continues its sequence at consecutive positions; the KV pool holds them.
    std::vector<RunSpan> runs;
    for (size_t k = 0; k < n;) {
      const nt_batch::Entry& head = b.entries[order[k]];
      const int64_t length = ctx.runner->seq_length(ctx.sequences[size_t(head.seq)]);
      if (head.pos > length) {
        refuse(NT_STATUS_OUT_OF_RANGE, "nt_decode: entry {}: sequence {} holds {} positions, so it continues at {} at most, "
               "not {}", order[k], head.seq, length, length, head.pos);
      }
      size_t end = k + 1;
      for (; end < n && b.entries[order[end]].seq == head.seq; ++end) {
        const nt_batch::Entry& e = b.entries[order[end]];
        const nt_pos expected = b.entries[order[end - 1]].pos + 1;
        if (e.pos != expected) {
          refuse(NT_STATUS_OUT_OF_RANGE, "nt_decode: entry {}: sequence {} is at position {} here, not {} (a sequence's "
                 "entries take consecutive positions)", order[end], e.seq, expected, e.pos);
        }
      }
      runs.push_back({ctx.sequences[size_t(head.seq)], head.pos, b.entries[order[end - 1]].pos + 1});
      k = end;
    }
    if (const int64_t short_by = pages_short(ctx, runs); short_by > 0) {
      const nt::KvPages& pages = ctx.runner->kv_pages();
      refuse(NT_STATUS_NO_MEMORY, "nt_decode: the KV pool lacks {} of the pages the batch needs ({} free of {})", short_by,
             pages.free_pages(), pages.page_count());
    }
    ctx.batch.clear();
    std::vector<int64_t> entry_of_slot(n);
    for (size_t k = 0; k < n; ++k) {
      const nt_batch::Entry& e = b.entries[order[k]];
      ctx.batch.add(e.token, e.pos, ctx.sequences[size_t(e.seq)], e.logits ? nt::Output::Logits : nt::Output::None);
      entry_of_slot[k] = int64_t(order[k]);
    }
    try {
      run_pass(ctx, ctx.batch, ctx.outputs);
    } catch (...) {
      sync_tokens(ctx);  // the runner ends a failed batch's sequences where it started them
      throw;
    }
    ctx.entry_row.assign(n, -1);
    for (size_t k = 0; k < n; ++k) ctx.entry_row[size_t(entry_of_slot[k])] = ctx.outputs.index[k];
    for (size_t i = 0; i < n; ++i) {
      if (b.entries[i].logits) ctx.last_logits_entry = int64_t(i);
    }
    ctx.has_outputs = true;
    for (size_t k = 0; k < n; ++k) {
      const nt_batch::Entry& e = b.entries[order[k]];
      auto& tokens = ctx.tokens[size_t(e.seq)];
      tokens.resize(size_t(e.pos));
      tokens.push_back(e.token);
    }
    return NT_STATUS_OK;
  });
}

nt_status nt_get_logits(nt_context* ctx, int32_t i, const float** out) {
  return guard([&] {
    nt_context& c = context_arg(ctx, "nt_get_logits");
    need(out, "nt_get_logits", "out");
    *out = logits_row(c, i, "nt_get_logits");
    return NT_STATUS_OK;
  });
}

// ---- Sequences

nt_status nt_seq_length(const nt_context* ctx, nt_seq_id seq, nt_pos* out) {
  return guard([&] {
    const nt_context& c = context_arg(ctx, "nt_seq_length");
    need(out, "nt_seq_length", "out");
    check_batch_mode(c, "nt_seq_length");
    check_seq(c, seq, "nt_seq_length");
    *out = nt_pos(c.runner->seq_length(c.sequences[size_t(seq)]));
    return NT_STATUS_OK;
  });
}

nt_status nt_seq_pos_min(const nt_context* ctx, nt_seq_id seq, nt_pos* out) {
  return guard([&] {
    const nt_context& c = context_arg(ctx, "nt_seq_pos_min");
    need(out, "nt_seq_pos_min", "out");
    check_batch_mode(c, "nt_seq_pos_min");
    check_seq(c, seq, "nt_seq_pos_min");
    const nt::SeqId s = c.sequences[size_t(seq)];
    *out = c.runner->seq_length(s) == 0 ? -1 : nt_pos(c.runner->seq_first_held(s));
    return NT_STATUS_OK;
  });
}

nt_status nt_seq_rm(nt_context* ctx, nt_seq_id seq, nt_pos p0, nt_pos p1) {
  return guard([&] {
    nt_context& c = context_arg(ctx, "nt_seq_rm");
    check_batch_mode(c, "nt_seq_rm");
    if (seq != -1) check_seq(c, seq, "nt_seq_rm");
    const int64_t from = std::max<nt_pos>(p0, 0);
    if (p1 >= 0 && from >= p1) return NT_STATUS_OK;  // an empty range
    for (nt_seq_id s = 0; s < nt_seq_id(c.params.n_seq_max); ++s) {
      if (seq != -1 && s != seq) continue;
      const int64_t length = c.runner->seq_length(c.sequences[size_t(s)]);
      if (p1 >= 0 && p1 < length && from < p1) {
        refuse(NT_STATUS_UNSUPPORTED, "nt_seq_rm: sequence {} holds {} positions; removing {}..{} would leave a hole "
               "(remove to the end: p1 -1)", s, length, from, p1 - 1);
      }
      if (from < length && !c.runner->seq_resumable(c.sequences[size_t(s)], from)) {
        const int64_t held = c.runner->seq_first_held(c.sequences[size_t(s)]), window = c.runner->window_pages()->window();
        refuse(NT_STATUS_UNSUPPORTED, "nt_seq_rm: sequence {}'s sliding-window layers keep its positions from {} "
               "(a window of {}); position {} would need earlier ones: cut it to 0, or not below {}",
               s, held, window, from, held + window - 1);
      }
    }
    for (nt_seq_id s = 0; s < nt_seq_id(c.params.n_seq_max); ++s) {
      if (seq == -1 || s == seq) truncate_seq(c, s, from);
    }
    return NT_STATUS_OK;
  });
}

nt_status nt_seq_cp(nt_context* ctx, nt_seq_id src, nt_seq_id dst, nt_pos p0, nt_pos p1) {
  return guard([&] {
    nt_context& c = context_arg(ctx, "nt_seq_cp");
    check_batch_mode(c, "nt_seq_cp");
    check_seq(c, src, "nt_seq_cp");
    check_seq(c, dst, "nt_seq_cp");
    if (p0 > 0) {
      refuse(NT_STATUS_UNSUPPORTED, "nt_seq_cp: p0 {}: a sequence copies a prefix, from position 0 (p0 0 or -1)", p0);
    }
    if (src == dst) return NT_STATUS_OK;
    const int64_t length = c.runner->seq_length(c.sequences[size_t(src)]);
    const int64_t count = p1 < 0 ? length : std::min<int64_t>(p1, length);
    c.runner->seq_copy_prefix(c.sequences[size_t(src)], c.sequences[size_t(dst)], count);
    c.tokens[size_t(dst)].assign(c.tokens[size_t(src)].begin(), c.tokens[size_t(src)].begin() + count);
    return NT_STATUS_OK;
  });
}

nt_status nt_seq_keep(nt_context* ctx, nt_seq_id seq) {
  return guard([&] {
    nt_context& c = context_arg(ctx, "nt_seq_keep");
    check_batch_mode(c, "nt_seq_keep");
    check_seq(c, seq, "nt_seq_keep");
    for (nt_seq_id s = 0; s < nt_seq_id(c.params.n_seq_max); ++s) {
      if (s != seq) truncate_seq(c, s, 0);
    }
    return NT_STATUS_OK;
  });
}

nt_status nt_memory_clear(nt_context* ctx) {
  return guard([&] {
    nt_context& c = context_arg(ctx, "nt_memory_clear");
    check_batch_mode(c, "nt_memory_clear");
    for (nt_seq_id s = 0; s < nt_seq_id(c.params.n_seq_max); ++s) truncate_seq(c, s, 0);
    return NT_STATUS_OK;
  });
}

// ---- Counters

nt_status nt_context_get_counters(const nt_context* ctx, nt_counters* out) {
  return guard([&] {
    const nt_context& c = context_arg(ctx, "nt_context_get_counters");
    need(out, "nt_context_get_counters", "out");
    nt_counters k;
    std::memset(&k, 0, sizeof k);
    k.weight_bytes_per_token = c.runner->weight_bytes_per_token();
    k.kv_bytes_per_position = c.runner->kv_bytes_per_position();
    request_counters(c, k);
    *out = k;
    return NT_STATUS_OK;
  });
}

nt_status nt_context_reset_counters(nt_context* ctx) {
  return guard([&] {
    nt_context& c = context_arg(ctx, "nt_context_reset_counters");
    reset_request_counters(c);
    return NT_STATUS_OK;
  });
}

}  // extern "C"
