// What the C API's source files share about contexts: argument checks, the
// pass that every nt_decode and state load runs, and the request side's
// hooks that the context's life and counters call.
#pragma once

#include "capi/handles.h"

namespace nt::capi {

// The context argument: NT_STATUS_INVALID_ARGUMENT when NULL, INVALID_STATE when broken.
nt_context& context_arg(nt_context* ctx, const char* function);
const nt_context& context_arg(const nt_context* ctx, const char* function);
// NT_STATUS_INVALID_STATE once the context serves requests.
void check_batch_mode(const nt_context& ctx, const char* function);
// NT_STATUS_OUT_OF_RANGE for a sequence id outside 0 .. n_seq_max - 1.
void check_seq(const nt_context& ctx, nt_seq_id seq, const char* function);
void forget_outputs(nt_context& ctx);
// The C sequence keeps its first `length` positions.
void truncate_seq(nt_context& ctx, nt_seq_id seq, int64_t length);
// One forward pass, after the abort callback, counted.
void run_pass(nt_context& ctx, const nt::Batch& batch, nt::BatchOutputs& out);
// The logits of entry i of the last nt_decode (-1: the last that asked).
const float* logits_row(nt_context& ctx, int32_t i, const char* function);

// requests.cpp: ends the context's requests and joins its thread.
void stop_requests(nt_context& ctx);
// Adds the passes, tokens and seconds of the batch API and of requests.
void request_counters(const nt_context& ctx, nt_counters& out);
void reset_request_counters(nt_context& ctx);

}  // namespace nt::capi
