/* ntransformer: the C API.
 *
 * Plain C99, for C, C++ and foreign-function interfaces (ctypes, cffi).
 * Link with -lntransformer (pkg-config ntransformer, or CMake
 * find_package(ntransformer) and the target ntransformer::ntransformer).
 *
 * Objects
 *   nt_model    a GGUF file opened: its vocabulary, chat template and shape.
 *   nt_context  a runner over a model: the weights on their device, a KV pool
 *               for up to n_seq_max sequences, and either the batch API
 *               (nt_decode, nt_get_logits, nt_seq_*) or requests (nt_request_*).
 *   nt_batch    tokens to decode in one pass: {token, position, sequence, logits wanted}.
 *   nt_sampler  a sampling chain: penalties, top-k, top-p, min-p, temperature,
 *               then a seeded draw or greedy.
 *
 * A minimal greedy loop (examples/c/simple.c is the whole program):
 *
 *   nt_model_params mp = nt_model_default_params();  mp.path = "model.gguf";
 *   nt_model* model;      nt_model_load(&mp, &model);
 *   nt_context_params cp = nt_context_default_params();
 *   nt_context* ctx;      nt_context_new(model, &cp, &ctx);
 *   nt_token ids[256];    int32_t n;
 *   nt_tokenize(model, "Once upon a time", -1, ids, 256, true, false, &n);
 *   nt_batch* batch;      nt_batch_init(512, &batch);
 *   for (int32_t i = 0; i < n; ++i) nt_batch_add(batch, ids[i], i, 0, i == n - 1);
 *   nt_sampler* greedy;   nt_sampler_chain_new(&greedy);  nt_sampler_chain_add_greedy(greedy);
 *   for (int32_t pos = n; pos < n + 64; ++pos) {
 *     nt_decode(ctx, batch);
 *     nt_token t;  nt_sampler_sample(greedy, ctx, -1, &t);
 *     bool eog;    nt_token_is_eog(model, t, &eog);  if (eog) break;
 *     ... nt_token_to_piece(model, t, ...) and print it ...
 *     nt_batch_clear(batch);  nt_batch_add(batch, t, pos, 0, true);
 *   }
 *
 * Errors
 *   Every function that can fail returns an nt_status; NT_STATUS_OK is 0.
 *   nt_last_error() then gives a message saying what was wrong, for the
 *   calling thread, until that thread's next failing call. NULL handles and
 *   pointers, out-of-range tokens, positions and sequence ids, and buffers too
 *   small are refused with a status and a message, never a crash, and no C++
 *   exception leaves the library. Outputs are written only on success, except
 *   the sizes that a too-small buffer reports.
 *
 * Threads
 *   - nt_last_error() is per thread.
 *   - A model may be used from several threads at once (tokenizing, chat
 *     templates, vocabulary queries, nt_context_new, nt_model_plan); free it
 *     after every context made from it is freed.
 *   - A context is used by one thread at a time, except nt_request_submit,
 *     nt_request_poll, nt_request_cancel and nt_context_get_counters, which
 *     may be called from any thread at any time. Requests run on a thread of
 *     the context's own, which calls their text callbacks.
 *   - A sampler or a batch is used by one thread at a time.
 *   - The progress and abort callbacks are called on the thread that loads
 *     or decodes (the request thread for requests).
 *
 * Strings are UTF-8. Text lengths of -1 mean NUL-terminated.
 */
#ifndef NTRANSFORMER_H
#define NTRANSFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The API's version: raised with every change of a signature, a struct's
 * layout or a meaning. nt_version() says which version the library has. */
#define NT_API_VERSION 1

#if defined(_WIN32)
#ifdef NT_BUILDING_LIBRARY
#define NT_API __declspec(dllexport)
#else
#define NT_API
#endif
#else
#define NT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status ------------------------------------------------------------ */

typedef enum nt_status {
  NT_STATUS_OK = 0,
  NT_STATUS_INVALID_ARGUMENT = 1, /* a NULL handle or pointer, a bad parameter value */
  NT_STATUS_OUT_OF_RANGE = 2,     /* a token, position, sequence or batch index outside its range */
  NT_STATUS_BUFFER_TOO_SMALL = 3, /* the size needed is reported (see each function) */
  NT_STATUS_INVALID_STATE = 4,    /* not now: no logits to sample, a context busy with requests, ... */
  NT_STATUS_NOT_FOUND = 5,        /* no such file or request */
  NT_STATUS_UNSUPPORTED = 6,      /* the engine cannot do this (see the message) */
  NT_STATUS_NO_MEMORY = 7,        /* memory, or the context's KV pool, ran out */
  NT_STATUS_ABORTED = 8,          /* the abort or progress callback stopped it */
  NT_STATUS_ENGINE_ERROR = 9,     /* the engine refused: a bad model file, a failed pass (see the message) */
  NT_STATUS_INTERNAL_ERROR = 10   /* a bug: please report the message */
} nt_status;

/* The calling thread's message for its last failed call ("" if none). Valid
 * until that thread's next call into the library. */
NT_API const char* nt_last_error(void);
/* "NT_STATUS_OK", "NT_STATUS_INVALID_ARGUMENT", ...; "unknown" for other values. */
NT_API const char* nt_status_name(nt_status status);
/* The library's version, "0.1.0 (API 1)". */
NT_API const char* nt_version(void);
/* NT_API_VERSION of the library: compare with the header's to find a mismatch at run time. */
NT_API int32_t nt_api_version(void);

/* ---- Types ------------------------------------------------------------- */

typedef int32_t nt_token;
typedef int32_t nt_pos;
typedef int32_t nt_seq_id;
typedef uint64_t nt_request_id;

typedef struct nt_model nt_model;
typedef struct nt_context nt_context;
typedef struct nt_sampler nt_sampler;
typedef struct nt_batch nt_batch;

typedef enum nt_device { NT_DEVICE_AUTO = 0, NT_DEVICE_CPU = 1, NT_DEVICE_CUDA = 2 } nt_device;
typedef enum nt_kv_type { NT_KV_F16 = 0, NT_KV_F32 = 1 } nt_kv_type;

/* Loading progress in [0, 1]; return false to cancel the load (NT_STATUS_ABORTED). */
typedef bool (*nt_progress_callback)(float progress, void* user_data);
/* Asked before each forward pass; return true to stop (NT_STATUS_ABORTED, or
 * for requests: every running request ends as interrupted). */
typedef bool (*nt_abort_callback)(void* user_data);

/* ---- Models ------------------------------------------------------------ */

typedef struct nt_model_params {
  const char* path;        /* the GGUF file (required) */
  nt_device device;        /* AUTO: CUDA when a usable GPU is there, else the CPU */
  uint64_t vram_budget;    /* CUDA: bytes of VRAM to use; 0: the free VRAM */
  uint64_t ram_budget;     /* CUDA: bytes of pinned host RAM for streamed layers; 0: automatic */
  nt_progress_callback progress_callback; /* may be NULL */
  void* progress_user_data;
  nt_abort_callback abort_callback;       /* may be NULL */
  void* abort_user_data;
} nt_model_params;

NT_API nt_model_params nt_model_default_params(void);

/* Opens the file and reads its shape, vocabulary and chat template; the
 * weights are mapped, not read. Each context made from the model loads them
 * onto its device (on the CPU, contexts share the mapping; on CUDA, each
 * context holds its own copy in VRAM): the progress and abort callbacks act
 * there. On success *out is a model to free with nt_model_free. */
NT_API nt_status nt_model_load(const nt_model_params* params, nt_model** out);
/* NULL is a no-op (NT_STATUS_OK). */
NT_API nt_status nt_model_free(nt_model* model);

/* Vocabulary size, n_layers, embedding width, trained context length. */
NT_API nt_status nt_vocab_size(const nt_model* model, int32_t* out);
NT_API nt_status nt_model_n_layers(const nt_model* model, int32_t* out);
NT_API nt_status nt_model_n_embd(const nt_model* model, int32_t* out);
NT_API nt_status nt_model_n_ctx_train(const nt_model* model, int32_t* out);
/* Beginning and end of text; -1 when the vocabulary has none. */
NT_API nt_status nt_token_bos(const nt_model* model, nt_token* out);
NT_API nt_status nt_token_eos(const nt_model* model, nt_token* out);
/* Whether generation ends at this token: EOS, EOT, EOM or the chat
 * template's end of turn. */
NT_API nt_status nt_token_is_eog(const nt_model* model, nt_token token, bool* out);

/* ---- Text ---------------------------------------------------------------- */

/* Text to token ids. add_special: BOS/EOS as the vocabulary asks;
 * parse_special: control-token text ("<|im_start|>") becomes those tokens.
 * On success *n_tokens is the count written to tokens (n_tokens_max room).
 * When they do not fit: NT_STATUS_BUFFER_TOO_SMALL and *n_tokens is minus
 * the count needed (tokens may be NULL with n_tokens_max 0 to ask). */
NT_API nt_status nt_tokenize(const nt_model* model, const char* text, int32_t text_len, nt_token* tokens,
                             int32_t n_tokens_max, bool add_special, bool parse_special, int32_t* n_tokens);

/* The bytes a token stands for ("▁" as a space, <0x0A> as its byte), not
 * NUL-terminated: pieces of one character may be split over tokens.
 * special: control tokens give their text; otherwise they give "". On
 * success *n_bytes is the count written. When they do not fit:
 * NT_STATUS_BUFFER_TOO_SMALL and *n_bytes is minus the count needed. */
NT_API nt_status nt_token_to_piece(const nt_model* model, nt_token token, bool special, char* buf, int32_t buf_size,
                                   int32_t* n_bytes);

typedef struct nt_chat_message {
  const char* role; /* "system", "user", "assistant" */
  const char* content;
} nt_chat_message;

/* Renders a conversation through the model's chat template (its Jinja
 * template, or a built-in format when tmpl names one: "chatml", "llama3",
 * "llama2", "plain"; NULL: the model's). add_assistant opens the assistant's
 * turn. The text is NUL-terminated; on success *n_bytes is its length
 * without the NUL. When it does not fit: NT_STATUS_BUFFER_TOO_SMALL and
 * *n_bytes is minus the size needed, NUL included. Tokenize the result with
 * parse_special true and add_special false (the template writes BOS where
 * the model wants one). */
NT_API nt_status nt_chat_apply_template(const nt_model* model, const char* tmpl, const nt_chat_message* messages,
                                        size_t n_messages, bool add_assistant, char* buf, int32_t buf_size,
                                        int32_t* n_bytes);

/* ---- Contexts ------------------------------------------------------------ */

typedef struct nt_context_params {
  uint32_t n_ctx;      /* positions one sequence holds; 0: the model's trained context, at most 4096 */
  uint32_t n_seq_max;  /* sequences held at once, ids 0 .. n_seq_max - 1 (requests: decoded at once) */
  uint32_t n_batch;    /* entries one nt_decode takes at most */
  nt_kv_type kv_type;  /* the KV cache's type; F32 on the CPU only */
  int32_t n_threads;   /* CPU threads; 0: the physical cores */
} nt_context_params;

NT_API nt_context_params nt_context_default_params(void);

/* The placement the CUDA runner would choose for this model under a
 * context's parameters (NULL: the defaults) and the model's budgets, as
 * JSON: the model's shape, each layer's bytes and tier (vram, ram, disk),
 * the VRAM and RAM totals and the bytes streamed per token. Budgets not
 * given are assumed (a 24 GiB card, the host's available memory) and say
 * so. NUL-terminated; sizes as nt_chat_apply_template's. */
NT_API nt_status nt_model_plan(const nt_model* model, const nt_context_params* params, char* buf,
                               int32_t buf_size, int32_t* n_bytes);

/* Loads the model's weights onto its device and makes a KV pool for
 * n_seq_max sequences of n_ctx positions each. */
NT_API nt_status nt_context_new(nt_model* model, const nt_context_params* params, nt_context** out);
/* Cancels the context's running requests and waits for its thread; NULL is a no-op. */
NT_API nt_status nt_context_free(nt_context* ctx);
/* Positions one sequence holds, and sequences held. */
NT_API nt_status nt_n_ctx(const nt_context* ctx, uint32_t* out);
NT_API nt_status nt_n_seq_max(const nt_context* ctx, uint32_t* out);

/* ---- Batches ------------------------------------------------------------ */

/* A batch of room for n_tokens_max entries. */
NT_API nt_status nt_batch_init(int32_t n_tokens_max, nt_batch** out);
NT_API nt_status nt_batch_free(nt_batch* batch); /* NULL is a no-op */
NT_API nt_status nt_batch_clear(nt_batch* batch);
/* Appends {token, pos, seq, logits}: logits asks for the entry's row of
 * logits after the pass (nt_get_logits, nt_sampler_sample). Ranges are
 * checked by nt_decode, which knows the model; a full batch is refused here. */
NT_API nt_status nt_batch_add(nt_batch* batch, nt_token token, nt_pos pos, nt_seq_id seq, bool logits);
NT_API nt_status nt_batch_size(const nt_batch* batch, int32_t* out);

/* ---- Decoding ------------------------------------------------------------ */

/* Runs one pass over the batch. A sequence's entries need not be contiguous
 * but follow each other in position order: the first continues the
 * sequence (its position at most the sequence's length, and an earlier one
 * drops the cached positions from there on), each next one at the position
 * after. Tokens, sequences and positions are checked first
 * (NT_STATUS_OUT_OF_RANGE), as are the context length and the KV pool
 * (NT_STATUS_NO_MEMORY, nothing decoded). The logits of the previous
 * nt_decode are gone once this one starts. */
NT_API nt_status nt_decode(nt_context* ctx, const nt_batch* batch);
/* The vocab-size row of logits of batch entry i of the last nt_decode (-1:
 * the last entry that asked for logits). Valid until the next nt_decode or
 * nt_context_free (sequence operations leave it). */
NT_API nt_status nt_get_logits(nt_context* ctx, int32_t i, const float** out);

/* ---- Sequences ------------------------------------------------------------ */

/* Positions seq holds (its next position), 0 when empty. */
NT_API nt_status nt_seq_length(const nt_context* ctx, nt_seq_id seq, nt_pos* out);
/* The first position of seq whose keys and values every layer still holds,
 * -1 when seq is empty: 0, except where sliding-window layers (Gemma 3's
 * local layers, half of gpt-oss's) keep only their window and about 256
 * positions more, and released the positions before. */
NT_API nt_status nt_seq_pos_min(const nt_context* ctx, nt_seq_id seq, nt_pos* out);
/* Removes positions [p0, p1) of seq (seq -1: every sequence; p0 < 0: 0;
 * p1 < 0: to the end). Sequences hold consecutive positions from 0, so the
 * removed range must reach the end of the sequence: a hole in the middle is
 * NT_STATUS_UNSUPPORTED, and so is a cut to a length whose next position's
 * window the sliding-window layers released (before nt_seq_pos_min + the
 * window); cutting to 0 always works. */
NT_API nt_status nt_seq_rm(nt_context* ctx, nt_seq_id seq, nt_pos p0, nt_pos p1);
/* Makes dst (emptied first) hold positions [0, p1) of src, sharing their KV
 * pages until either writes (p1 < 0: all of src). p0 must be 0 or -1: a
 * sequence copies a prefix (a shared system prompt). */
NT_API nt_status nt_seq_cp(nt_context* ctx, nt_seq_id src, nt_seq_id dst, nt_pos p0, nt_pos p1);
/* Empties every sequence but seq. */
NT_API nt_status nt_seq_keep(nt_context* ctx, nt_seq_id seq);
/* Empties every sequence. */
NT_API nt_status nt_memory_clear(nt_context* ctx);

/* A sequence's state: its tokens and, on backends that can read their KV
 * cache back (the CPU, and CUDA on one GPU), its cached keys and values, so
 * that loading it runs no pass and restores the cache exactly. Where the
 * backend cannot (a model split over several GPUs), or the state comes from
 * a context whose KV layout differs (KV type), loading decodes the saved
 * tokens again, which gives the cache the same prompt would. A state loads
 * into a context of the same model only (the model's shape is checked).
 *
 * nt_seq_state_save: NULL buf with buf_size 0 asks the size; too small:
 * NT_STATUS_BUFFER_TOO_SMALL, *n_bytes the size needed. */
NT_API nt_status nt_seq_state_save(nt_context* ctx, nt_seq_id seq, uint8_t* buf, size_t buf_size, size_t* n_bytes);
/* Replaces seq's cache with the state; on failure seq is left empty. */
NT_API nt_status nt_seq_state_load(nt_context* ctx, nt_seq_id seq, const uint8_t* buf, size_t buf_size);
/* The same to and from a file (written whole, then renamed into place). */
NT_API nt_status nt_seq_state_save_file(nt_context* ctx, nt_seq_id seq, const char* path);
NT_API nt_status nt_seq_state_load_file(nt_context* ctx, nt_seq_id seq, const char* path);

/* ---- Sampling ------------------------------------------------------------ */

/* A chain is built in the engine's order, which is llama.cpp's default:
 * penalties, top-k, top-p, min-p, temperature, then dist (a seeded draw) or
 * greedy (the highest logit after the penalties; the filters before it do
 * not change which token that is). Steps are added in that order, each at
 * most once, and dist or greedy ends the chain: anything else is
 * NT_STATUS_INVALID_ARGUMENT. A chain without dist or greedy cannot sample. */
NT_API nt_status nt_sampler_chain_new(nt_sampler** out);
NT_API nt_status nt_sampler_chain_add_penalties(nt_sampler* chain, int32_t last_n, float repeat, float frequency,
                                                float presence);
NT_API nt_status nt_sampler_chain_add_top_k(nt_sampler* chain, int32_t k);   /* k <= 0: the whole vocabulary */
NT_API nt_status nt_sampler_chain_add_top_p(nt_sampler* chain, float p);     /* [0, 1]; 1: off */
NT_API nt_status nt_sampler_chain_add_min_p(nt_sampler* chain, float p);     /* [0, 1]; 0: off */
NT_API nt_status nt_sampler_chain_add_temp(nt_sampler* chain, float t);      /* > 0; <= 0: greedy */
NT_API nt_status nt_sampler_chain_add_dist(nt_sampler* chain, uint64_t seed);
NT_API nt_status nt_sampler_chain_add_greedy(nt_sampler* chain);
/* Picks a token from the logits of batch entry i of the last nt_decode (-1:
 * the last entry that asked), and records it in the penalty window as
 * nt_sampler_accept does. The same seed and logits give the same tokens. */
NT_API nt_status nt_sampler_sample(nt_sampler* chain, nt_context* ctx, int32_t i, nt_token* out);
/* Records a token of the running text (a prompt token) for the penalties. */
NT_API nt_status nt_sampler_accept(nt_sampler* chain, nt_token token);
/* Forgets the history and restarts the random draws from the seed. */
NT_API nt_status nt_sampler_reset(nt_sampler* chain);
NT_API nt_status nt_sampler_free(nt_sampler* chain); /* NULL is a no-op */

/* ---- Requests ------------------------------------------------------------ */

/* Whole generations through the engine's continuous batching: requests on
 * one context share its passes (n_seq_max at once, the rest wait), each
 * with its own sampler, stop rules and streamed text. A context serves
 * either requests or the batch API: the first nt_request_submit needs every
 * sequence empty, and after it nt_decode and nt_seq_* give
 * NT_STATUS_INVALID_STATE. */

/* Text as it comes (complete UTF-8), on the context's request thread;
 * return false to cancel the request. It may call nt_request_cancel and
 * nt_request_submit, not nt_request_poll (waiting there would stall the
 * thread that produces the text) nor nt_context_free. */
typedef bool (*nt_text_callback)(nt_request_id id, const char* text, size_t len, void* user_data);

typedef struct nt_request_params {
  /* Each in the range the CLI's flags take (NT_STATUS_INVALID_ARGUMENT otherwise). */
  int32_t max_tokens;       /* -1: until the end of text or a full context */
  float temperature;        /* 0: greedy */
  int32_t top_k;            /* 0: off */
  float top_p;              /* [0, 1]; 1: off */
  float min_p;              /* [0, 1]; 0: off */
  float repeat_penalty;     /* > 0; 1: off */
  int32_t repeat_last_n;    /* 0: off; -1: the whole text */
  float frequency_penalty;  /* 0: off */
  float presence_penalty;   /* 0: off */
  uint64_t seed;
  bool ignore_eos;          /* generate past the end of text */
  const char* const* stop;  /* stop strings (n_stop of them; may be NULL) */
  size_t n_stop;
  nt_text_callback on_text; /* may be NULL: poll instead */
  void* user_data;
} nt_request_params;

/* llama.cpp's sampling defaults (temperature 0.8, top-k 40, top-p 0.95,
 * min-p 0.05), 256 tokens, seed 0. */
NT_API nt_request_params nt_request_default_params(void);

/* Queues a request: either `prompt` (raw text, BOS as the vocabulary wants)
 * or `messages_json`, a JSON array of {"role": ..., "content": ...} rendered
 * by the model's chat template; the other NULL. Any thread. */
NT_API nt_status nt_request_submit(nt_context* ctx, const char* prompt, const char* messages_json,
                                   const nt_request_params* params, nt_request_id* out);

typedef enum nt_request_state { NT_REQUEST_RUNNING = 0, NT_REQUEST_DONE = 1 } nt_request_state;
typedef enum nt_stop_reason {
  NT_STOP_NONE = 0,         /* still running */
  NT_STOP_TOKEN_LIMIT = 1,
  NT_STOP_END_OF_TEXT = 2,  /* a stop token */
  NT_STOP_STOP_STRING = 3,
  NT_STOP_CONTEXT_FULL = 4,
  NT_STOP_CANCELLED = 5,    /* nt_request_cancel, a callback, the abort callback or nt_context_free */
  NT_STOP_ERROR = 6         /* the request could not run: see nt_request_poll's message */
} nt_stop_reason;

typedef struct nt_request_status {
  nt_request_state state;
  nt_stop_reason stop;
  int32_t prompt_tokens;
  int32_t completion_tokens;
} nt_request_status;

/* Waits up to timeout_ms (0: not at all, -1: no limit) for new text or the
 * end of the request, then copies the text produced since the last poll
 * into buf (at most buf_size - 1 bytes, whole UTF-8 characters,
 * NUL-terminated; what does not fit waits for the next poll) and its length
 * to *n_bytes, and the request's state to *status (status may be NULL).
 * The state is NT_REQUEST_DONE once the request has ended and all its text
 * has been read, this poll's included: that poll is the last, and the
 * request is forgotten (polling it again is NT_STATUS_NOT_FOUND). So
 *   do { nt_request_poll(ctx, id, -1, buf, size, &n, &st); use(buf, n); }
 *   while (st.state != NT_REQUEST_DONE);
 * reads a request whole. buf may be NULL (n_bytes too) to read the state
 * alone; text a request keeps then waits (a request with a text callback
 * keeps none). A request that failed returns NT_STATUS_ENGINE_ERROR from
 * its last poll, with *status filled (NT_STOP_ERROR) and the reason in
 * nt_last_error(). Any thread; not from a text callback of the same
 * context. */
NT_API nt_status nt_request_poll(nt_context* ctx, nt_request_id id, int32_t timeout_ms, char* buf, size_t buf_size,
                                 size_t* n_bytes, nt_request_status* status);
/* Ends a request at the next pass (NT_STOP_CANCELLED). Any thread. */
NT_API nt_status nt_request_cancel(nt_context* ctx, nt_request_id id);

/* ---- Counters ------------------------------------------------------------ */

typedef struct nt_counters {
  uint64_t weight_bytes_per_token; /* bytes of weights one pass reads (streamed ones cross the link) */
  uint64_t kv_bytes_per_position;  /* K and V of one position over all layers */
  int64_t passes;                  /* forward passes run */
  int64_t tokens;                  /* batch entries decoded (prompt and generated) */
  int64_t prompt_tokens;           /* requests: prompt positions evaluated */
  int64_t generated_tokens;        /* requests: tokens generated */
  double seconds;                  /* in passes */
} nt_counters;

/* Since the context was made (or nt_counters_reset). Any thread. */
NT_API nt_status nt_context_get_counters(const nt_context* ctx, nt_counters* out);
NT_API nt_status nt_context_reset_counters(nt_context* ctx);
/* The backend and placement in words: "cpu (2 threads, avx2, ...)". NUL-terminated; sizes as nt_chat_apply_template's. */
NT_API nt_status nt_context_description(const nt_context* ctx, char* buf, int32_t buf_size, int32_t* n_bytes);

#ifdef __cplusplus
}
#endif

#endif /* NTRANSFORMER_H */
