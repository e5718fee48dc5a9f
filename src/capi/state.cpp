// A sequence's state, saved and loaded: its tokens, and where the backend
// reads its cache back (ModelRunner::saves_kv_rows), its K and V rows.
//
// Layout, little-endian:
//   "NTSEQST\0"  u32 version  u32 flags (1: rows present)
//   u32 n_layers  u32 n_embd  u32 vocab  u32 kv_type (0 F16, 1 F32)
//   u64 kv_bytes_per_position  u64 n_tokens  i32 tokens[n_tokens]
//   rows: n_tokens x kv_bytes_per_position bytes (with flag 1)
#include <cstring>
#include <fstream>
#include <iterator>

#include "capi/api_guard.h"
#include "capi/context_internal.h"
#include "capi/handles.h"
#include "core/output_file.h"

using nt::capi::guard;
using nt::capi::need;
using nt::capi::refuse;

namespace {

constexpr char kMagic[8] = {'N', 'T', 'S', 'E', 'Q', 'S', 'T', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHasRows = 1;

struct Header {
  uint32_t version, flags, n_layers, n_embd, vocab, kv_type;
  uint64_t kv_bytes_per_position, n_tokens;
};
constexpr size_t kHeaderBytes = sizeof kMagic + 6 * 4 + 2 * 8;

template <class T>
void put(std::vector<uint8_t>& out, T value) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the hosts this runs on are little-endian
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <class T>
T get(const uint8_t*& at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  at += sizeof(T);
  return value;
}

std::vector<uint8_t> save_state(nt_context& ctx, nt_seq_id seq) {
  const std::vector<int32_t>& tokens = ctx.tokens[size_t(seq)];
  const nt::SeqId rs = ctx.sequences[size_t(seq)];
  if (int64_t(tokens.size()) != ctx.runner->seq_length(rs)) {
    refuse(NT_STATUS_INTERNAL_ERROR, "sequence {}: {} tokens recorded for {} cached positions", seq, tokens.size(),
           ctx.runner->seq_length(rs));
  }
  const bool rows = ctx.runner->saves_kv_rows();
  const nt::ModelSpec& c = ctx.runner->config();
  std::vector<uint8_t> out(kMagic, kMagic + sizeof kMagic);
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, rows ? kHasRows : 0);
  put<uint32_t>(out, uint32_t(c.n_layers));
  put<uint32_t>(out, uint32_t(c.dim));
  put<uint32_t>(out, uint32_t(c.vocab_size));
  put<uint32_t>(out, ctx.kv_f32 ? 1 : 0);
  put<uint64_t>(out, rows ? ctx.runner->kv_bytes_per_position() : 0);
  put<uint64_t>(out, tokens.size());
  for (const int32_t t : tokens) put<int32_t>(out, t);
  if (rows) {
    const std::vector<uint8_t> bytes = ctx.runner->seq_save_rows(rs);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

void load_state(nt_context& ctx, nt_seq_id seq, const uint8_t* data, size_t size) {
  nt::capi::truncate_seq(ctx, seq, 0);
  if (size < kHeaderBytes || std::memcmp(data, kMagic, sizeof kMagic) != 0) {
    refuse(NT_STATUS_INVALID_ARGUMENT, "not a sequence state ({} bytes, no NTSEQST header)", size);
  }
  const uint8_t* at = data + sizeof kMagic;
  Header h;
  h.version = get<uint32_t>(at);
  h.flags = get<uint32_t>(at);
  h.n_layers = get<uint32_t>(at);
  h.n_embd = get<uint32_t>(at);
  h.vocab = get<uint32_t>(at);
  h.kv_type = get<uint32_t>(at);
  h.kv_bytes_per_position = get<uint64_t>(at);
  h.n_tokens = get<uint64_t>(at);
  if (h.version != kVersion) refuse(NT_STATUS_UNSUPPORTED, "a sequence state of version {}; this library reads {}", h.version, kVersion);
  const nt::ModelSpec& c = ctx.runner->config();
  if (h.n_layers != uint64_t(c.n_layers) || h.n_embd != uint64_t(c.dim) || h.vocab != uint64_t(c.vocab_size)) {
    refuse(NT_STATUS_INVALID_ARGUMENT, "the state is of a model of {} layers, width {}, {} tokens; this one has {}, {}, {}",
           h.n_layers, h.n_embd, h.vocab, c.n_layers, c.dim, c.vocab_size);
  }
  if (h.n_tokens > uint64_t(ctx.context_size)) {
    refuse(NT_STATUS_NO_MEMORY, "the state holds {} positions, the context {}", h.n_tokens, ctx.context_size);
  }
  const bool rows = (h.flags & kHasRows) != 0;
  const size_t rest = size - kHeaderBytes;
  const size_t token_bytes = size_t(h.n_tokens) * 4;
  const size_t row_bytes = rows ? size_t(h.n_tokens) * size_t(h.kv_bytes_per_position) : 0;
  if (rest < token_bytes || rest - token_bytes != row_bytes) {
    refuse(NT_STATUS_INVALID_ARGUMENT, "a truncated or damaged sequence state: {} bytes after the header, {} expected",
           rest, token_bytes + row_bytes);
  }
  std::vector<int32_t> tokens(size_t(h.n_tokens));
  for (auto& t : tokens) {
    t = get<int32_t>(at);
    if (t < 0 || t >= c.vocab_size) refuse(NT_STATUS_INVALID_ARGUMENT, "the state holds token {}, outside the vocabulary", t);
  }
  const nt::SeqId rs = ctx.sequences[size_t(seq)];
  const bool same_layout = rows && ctx.runner->saves_kv_rows() && h.kv_type == (ctx.kv_f32 ? 1u : 0u) &&
                           h.kv_bytes_per_position == ctx.runner->kv_bytes_per_position();
  if (same_layout) {
    const int64_t free = ctx.runner->kv_pages().free_pages();
    if (ctx.runner->kv_pages().pages_for(int64_t(h.n_tokens)) > free) {
      refuse(NT_STATUS_NO_MEMORY, "the state's {} positions need more KV pages than the pool's {} free", h.n_tokens, free);
    }
    ctx.runner->seq_load_rows(rs, int64_t(h.n_tokens), {at, row_bytes});
  } else if (!tokens.empty()) {
    // Decode the tokens again: the cache a prompt of them gives.
    nt::Batch batch;
    batch.add_run(tokens, 0, rs, nt::Output::None);
    nt::BatchOutputs out;
    try {
      nt::capi::run_pass(ctx, batch, out);
    } catch (...) {
      nt::capi::truncate_seq(ctx, seq, 0);
      throw;
    }
  }
  ctx.tokens[size_t(seq)] = std::move(tokens);
}

nt_context& state_context(nt_context* ctx, nt_seq_id seq, const char* function) {
  nt_context& c = nt::capi::context_arg(ctx, function);
  nt::capi::check_batch_mode(c, function);
  nt::capi::check_seq(c, seq, function);
  return c;
}

}  // namespace

extern "C" {

nt_status nt_seq_state_save(nt_context* ctx, nt_seq_id seq, uint8_t* buf, size_t buf_size, size_t* n_bytes) {
  return guard([&] {
    nt_context& c = state_context(ctx, seq, "nt_seq_state_save");
    need(n_bytes, "nt_seq_state_save", "n_bytes");
    if (!buf && buf_size > 0) refuse(NT_STATUS_INVALID_ARGUMENT, "nt_seq_state_save: buf is NULL but buf_size is {}", buf_size);
    const std::vector<uint8_t> state = save_state(c, seq);
    *n_bytes = state.size();
    if (buf_size < state.size()) {
      refuse(NT_STATUS_BUFFER_TOO_SMALL, "nt_seq_state_save: the state is {} bytes, the buffer holds {}", state.size(),
             buf_size);
    }
    std::memcpy(buf, state.data(), state.size());
    return NT_STATUS_OK;
  });
}

nt_status nt_seq_state_load(nt_context* ctx, nt_seq_id seq, const uint8_t* buf, size_t buf_size) {
  return guard([&] {
    nt_context& c = state_context(ctx, seq, "nt_seq_state_load");
    need(buf, "nt_seq_state_load", "buf");
    try {
      load_state(c, seq, buf, buf_size);
    } catch (const nt::capi::ApiError& e) {
      refuse(e.status(), "nt_seq_state_load: {}", e.what());
    }
    return NT_STATUS_OK;
  });
}

nt_status nt_seq_state_save_file(nt_context* ctx, nt_seq_id seq, const char* path) {
  return guard([&] {
    nt_context& c = state_context(ctx, seq, "nt_seq_state_save_file");
    need(path, "nt_seq_state_save_file", "path");
    const std::vector<uint8_t> state = save_state(c, seq);
    nt::write_file_atomically(path, "the sequence state",
                              std::string_view(reinterpret_cast<const char*>(state.data()), state.size()));
    return NT_STATUS_OK;
  });
}

nt_status nt_seq_state_load_file(nt_context* ctx, nt_seq_id seq, const char* path) {
  return guard([&] {
    nt_context& c = state_context(ctx, seq, "nt_seq_state_load_file");
    need(path, "nt_seq_state_load_file", "path");
    std::ifstream in(path, std::ios::binary);
    if (!in) refuse(NT_STATUS_NOT_FOUND, "nt_seq_state_load_file: {}: cannot open it", path);
    const std::vector<uint8_t> state((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) refuse(NT_STATUS_ENGINE_ERROR, "nt_seq_state_load_file: {}: a read failed", path);
    try {
      load_state(c, seq, state.data(), state.size());
    } catch (const nt::capi::ApiError& e) {
      refuse(e.status(), "nt_seq_state_load_file: {}: {}", path, e.what());
    }
    return NT_STATUS_OK;
  });
}

}  // extern "C"
