/* The C API from C: every call, with good arguments and with wrong ones
 * (NULL handles and pointers, out-of-range tokens, positions and sequences,
 * buffers too small), each wrong one refused with its status and a message.
 *
 *   capi_test MODEL.gguf
 *
 * MODEL is a small model with a vocabulary of SentencePiece or BPE tokens
 * (the tests run it on stories260K converted to GGUF). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntransformer.h"

static int g_failures = 0;
static int g_checks = 0;

#define EXPECT(cond)                                                     \
  do {                                                                   \
    ++g_checks;                                                          \
    if (!(cond)) {                                                       \
      ++g_failures;                                                      \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
    }                                                                    \
  } while (0)

/* A call that must succeed. */
#define OK(call)                                                                                     \
  do {                                                                                               \
    nt_status s_ = (call);                                                                           \
    ++g_checks;                                                                                      \
    if (s_ != NT_STATUS_OK) {                                                                        \
      ++g_failures;                                                                                  \
      fprintf(stderr, "%s:%d: %s gave %s: %s\n", __FILE__, __LINE__, #call, nt_status_name(s_), \
              nt_last_error());                                                                      \
    }                                                                                                \
  } while (0)

/* A call that must fail with `status` and leave a message saying why. */
#define FAILS(status, call)                                                                                 \
  do {                                                                                                      \
    nt_status s_ = (call);                                                                                  \
    ++g_checks;                                                                                             \
    if (s_ != (status) || nt_last_error()[0] == '\0') {                                                     \
      ++g_failures;                                                                                         \
      fprintf(stderr, "%s:%d: %s gave %s (\"%s\"), expected %s\n", __FILE__, __LINE__, #call, nt_status_name(s_), \
              nt_last_error(), nt_status_name(status));                                                     \
    }                                                                                                       \
  } while (0)

static const char* g_model_path;

static nt_model* load_model(void) {
  nt_model_params mp = nt_model_default_params();
  mp.path = g_model_path;
  mp.device = NT_DEVICE_CPU;
  nt_model* model = NULL;
  OK(nt_model_load(&mp, &model));
  if (!model) exit(1);
  return model;
}

static nt_context* new_context(nt_model* model, uint32_t n_ctx, uint32_t n_seq, nt_kv_type kv) {
  nt_context_params cp = nt_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_seq_max = n_seq;
  cp.kv_type = kv;
  cp.n_threads = 1;
  nt_context* ctx = NULL;
  OK(nt_context_new(model, &cp, &ctx));
  if (!ctx) exit(1);
  return ctx;
}

static int argmax(const float* row, int32_t n) {
  int best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

static void test_library(void) {
  EXPECT(nt_api_version() == NT_API_VERSION);
  EXPECT(strstr(nt_version(), "API") != NULL);
  EXPECT(strcmp(nt_status_name(NT_STATUS_OK), "NT_STATUS_OK") == 0);
  EXPECT(strcmp(nt_status_name((nt_status)999), "unknown") == 0);
  EXPECT(nt_last_error() != NULL);
}

static void test_model_errors(void) {
  nt_model* model = NULL;
  nt_model_params mp = nt_model_default_params();
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_load(NULL, &model));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_load(&mp, &model)); /* no path */
  mp.path = g_model_path;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_load(&mp, NULL));
  mp.device = (nt_device)7;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_load(&mp, &model));
  mp.device = NT_DEVICE_CPU;
  mp.path = "/nonexistent/model.gguf";
  FAILS(NT_STATUS_NOT_FOUND, nt_model_load(&mp, &model));
  EXPECT(strstr(nt_last_error(), "/nonexistent/model.gguf") != NULL);
  /* Not a GGUF file: this program's own source, or any file that is not one. */
  char junk[] = "/tmp/nt_capi_junk_XXXXXX";
  int fd = mkstemp(junk);
  EXPECT(fd >= 0);
  if (fd >= 0) {
    EXPECT(write(fd, "not a model", 11) == 11);
    close(fd);
    mp.path = junk;
    FAILS(NT_STATUS_ENGINE_ERROR, nt_model_load(&mp, &model));
    unlink(junk);
  }
  EXPECT(model == NULL);
  OK(nt_model_free(NULL));
}

static void test_vocabulary(nt_model* model) {
  int32_t n = 0;
  OK(nt_vocab_size(model, &n));
  EXPECT(n > 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_vocab_size(NULL, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_vocab_size(model, NULL));
  int32_t layers = 0, embd = 0, train = 0;
  OK(nt_model_n_layers(model, &layers));
  OK(nt_model_n_embd(model, &embd));
  OK(nt_model_n_ctx_train(model, &train));
  EXPECT(layers > 0 && embd > 0 && train > 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_n_layers(NULL, &layers));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_n_embd(model, NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_n_ctx_train(NULL, NULL));

  nt_token bos = -2, eos = -2;
  OK(nt_token_bos(model, &bos));
  OK(nt_token_eos(model, &eos));
  EXPECT(bos >= -1 && bos < n && eos >= -1 && eos < n);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_token_bos(NULL, &bos));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_token_eos(model, NULL));
  bool eog = false;
  if (eos >= 0) {
    OK(nt_token_is_eog(model, eos, &eog));
    EXPECT(eog);
  }
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_token_is_eog(model, n, &eog));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_token_is_eog(model, -1, &eog));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_token_is_eog(model, 0, NULL));
}

static void test_text(nt_model* model) {
  const char* text = "Once upon a time";
  int32_t n = 0;
  /* Asking the size: a negative count, as llama.h gives it. */
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_tokenize(model, text, -1, NULL, 0, true, false, &n));
  EXPECT(n < 0);
  const int32_t needed = -n;
  nt_token tokens[64];
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_tokenize(model, text, -1, tokens, needed - 1, true, false, &n));
  EXPECT(n == -needed);
  OK(nt_tokenize(model, text, -1, tokens, 64, true, false, &n));
  EXPECT(n == needed);
  int32_t n_len = 0;
  OK(nt_tokenize(model, text, (int32_t)strlen(text), tokens, 64, true, false, &n_len));
  EXPECT(n_len == n);
  int32_t n_plain = 0;
  OK(nt_tokenize(model, text, -1, tokens, 64, false, false, &n_plain));
  nt_token bos;
  OK(nt_token_bos(model, &bos));
  OK(nt_tokenize(model, text, -1, tokens, 64, true, false, &n));
  if (bos >= 0 && tokens[0] == bos) EXPECT(n_plain == n - 1);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_tokenize(NULL, text, -1, tokens, 64, true, false, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_tokenize(model, NULL, -1, tokens, 64, true, false, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_tokenize(model, text, -2, tokens, 64, true, false, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_tokenize(model, text, -1, NULL, 64, true, false, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_tokenize(model, text, -1, tokens, -1, true, false, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_tokenize(model, text, -1, tokens, 64, true, false, NULL));
  int32_t empty = -1;
  OK(nt_tokenize(model, "", 0, tokens, 64, false, false, &empty));
  EXPECT(empty == 0);

  /* The pieces of the prompt (without BOS) spell it, SentencePiece's leading space aside. */
  OK(nt_tokenize(model, text, -1, tokens, 64, false, false, &n));
  char joined[256] = {0};
  size_t at = 0;
  for (int32_t i = 0; i < n; ++i) {
    char piece[32];
    int32_t bytes = 0;
    OK(nt_token_to_piece(model, tokens[i], false, piece, (int32_t)sizeof piece, &bytes));
    EXPECT(bytes >= 0 && at + (size_t)bytes < sizeof joined);
    memcpy(joined + at, piece, (size_t)bytes);
    at += (size_t)bytes;
  }
  EXPECT(strcmp(joined[0] == ' ' ? joined + 1 : joined, text) == 0);
  int32_t bytes = 0;
  char piece[32];
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_token_to_piece(model, tokens[0], false, piece, 0, &bytes));
  EXPECT(bytes < 0);
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_token_to_piece(model, tokens[0], false, NULL, 0, &bytes));
  int32_t vocab;
  OK(nt_vocab_size(model, &vocab));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_token_to_piece(model, vocab, false, piece, 32, &bytes));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_token_to_piece(model, -5, false, piece, 32, &bytes));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_token_to_piece(model, 0, false, NULL, 32, &bytes));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_token_to_piece(model, 0, false, piece, -1, &bytes));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_token_to_piece(model, 0, false, piece, 32, NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_token_to_piece(NULL, 0, false, piece, 32, &bytes));
}

static void test_chat_template(nt_model* model) {
  nt_chat_message messages[] = {{"system", "Be brief."}, {"user", "Hello!"}};
  int32_t n = 0;
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_chat_apply_template(model, "chatml", messages, 2, true, NULL, 0, &n));
  EXPECT(n < 0);
  const int32_t size = -n;
  char* text = malloc((size_t)size);
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_chat_apply_template(model, "chatml", messages, 2, true, text, size - 1, &n));
  OK(nt_chat_apply_template(model, "chatml", messages, 2, true, text, size, &n));
  EXPECT(n == size - 1 && text[n] == '\0');
  EXPECT(strstr(text, "<|im_start|>user\nHello!<|im_end|>") != NULL);
  EXPECT(strstr(text, "<|im_start|>assistant\n") != NULL);
  free(text);
  char buf[4096];
  OK(nt_chat_apply_template(model, NULL, messages, 2, true, buf, (int32_t)sizeof buf, &n)); /* the model's own (or plain) */
  EXPECT(n > 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_chat_apply_template(model, "no-such-template", messages, 2, true, buf, 4096, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_chat_apply_template(NULL, NULL, messages, 2, true, buf, 4096, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_chat_apply_template(model, NULL, NULL, 2, true, buf, 4096, &n));
  nt_chat_message broken[] = {{"user", NULL}};
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_chat_apply_template(model, NULL, broken, 1, true, buf, 4096, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_chat_apply_template(model, NULL, messages, 2, true, buf, 4096, NULL));
}

static void test_plan(nt_model* model) {
  int32_t n = 0;
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_model_plan(model, NULL, NULL, 0, &n));
  EXPECT(n < 0);
  char* json = malloc((size_t)-n);
  OK(nt_model_plan(model, NULL, json, -n, &n));
  EXPECT(strstr(json, "\"layers\"") && strstr(json, "\"tier\":\"vram\"") && strstr(json, "\"bytes_streamed_per_token\""));
  free(json);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_plan(NULL, NULL, NULL, 0, &n));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_model_plan(model, NULL, NULL, 0, NULL));
}

static void test_context_errors(nt_model* model) {
  nt_context* ctx = NULL;
  nt_context_params cp = nt_context_default_params();
  EXPECT(cp.n_seq_max == 1 && cp.n_batch > 0 && cp.kv_type == NT_KV_F16);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_new(NULL, &cp, &ctx));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_new(model, NULL, &ctx));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_new(model, &cp, NULL));
  cp.n_seq_max = 0;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_new(model, &cp, &ctx));
  cp = nt_context_default_params();
  cp.n_batch = 0;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_new(model, &cp, &ctx));
  cp = nt_context_default_params();
  cp.kv_type = (nt_kv_type)9;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_new(model, &cp, &ctx));
  cp = nt_context_default_params();
  cp.n_threads = -3;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_new(model, &cp, &ctx));
  EXPECT(ctx == NULL);
  OK(nt_context_free(NULL));
  uint32_t u;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_n_ctx(NULL, &u));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_n_seq_max(NULL, &u));
}

static void test_batch_errors(void) {
  nt_batch* batch = NULL;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_batch_init(0, &batch));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_batch_init(4, NULL));
  OK(nt_batch_init(2, &batch));
  OK(nt_batch_add(batch, 1, 0, 0, false));
  OK(nt_batch_add(batch, 2, 1, 0, true));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_batch_add(batch, 3, 2, 0, true));
  int32_t size = 0;
  OK(nt_batch_size(batch, &size));
  EXPECT(size == 2);
  OK(nt_batch_clear(batch));
  OK(nt_batch_size(batch, &size));
  EXPECT(size == 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_batch_add(NULL, 1, 0, 0, false));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_batch_clear(NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_batch_size(NULL, &size));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_batch_size(batch, NULL));
  OK(nt_batch_free(batch));
  OK(nt_batch_free(NULL));
}

/* Decodes `tokens` into seq from position 0, logits for the last. */
static nt_status decode_prompt(nt_context* ctx, nt_batch* batch, const nt_token* tokens, int32_t n, nt_seq_id seq) {
  nt_batch_clear(batch);
  for (int32_t i = 0; i < n; ++i) nt_batch_add(batch, tokens[i], i, seq, i == n - 1);
  return nt_decode(ctx, batch);
}

/* Greedy tokens after the prompt through the batch API, on sequence 0. */
static int32_t greedy(nt_model* model, nt_context* ctx, const nt_token* prompt, int32_t n_prompt, int32_t n,
                      nt_token* out) {
  nt_batch* batch;
  OK(nt_batch_init(256, &batch));
  nt_sampler* chain;
  OK(nt_sampler_chain_new(&chain));
  OK(nt_sampler_chain_add_greedy(chain));
  OK(decode_prompt(ctx, batch, prompt, n_prompt, 0));
  int32_t got = 0;
  for (; got < n; ++got) {
    nt_token t;
    OK(nt_sampler_sample(chain, ctx, -1, &t));
    bool eog = false;
    OK(nt_token_is_eog(model, t, &eog));
    if (eog) break;
    out[got] = t;
    nt_batch_clear(batch);
    nt_batch_add(batch, t, n_prompt + got, 0, true);
    OK(nt_decode(ctx, batch));
  }
  nt_sampler_free(chain);
  nt_batch_free(batch);
  return got;
}

static void test_decode(nt_model* model) {
  nt_context* ctx = new_context(model, 64, 2, NT_KV_F16);
  uint32_t n_ctx = 0, n_seq = 0;
  OK(nt_n_ctx(ctx, &n_ctx));
  OK(nt_n_seq_max(ctx, &n_seq));
  EXPECT(n_ctx == 64 && n_seq == 2);
  char desc[256];
  int32_t n = 0;
  OK(nt_context_description(ctx, desc, (int32_t)sizeof desc, &n));
  EXPECT(strncmp(desc, "cpu", 3) == 0);
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_context_description(ctx, desc, 2, &n));

  int32_t vocab;
  OK(nt_vocab_size(model, &vocab));
  nt_token prompt[64];
  int32_t n_prompt = 0;
  OK(nt_tokenize(model, "Once upon a time", -1, prompt, 64, true, false, &n_prompt));
  nt_batch* batch;
  OK(nt_batch_init(600, &batch));
  const float* logits = NULL;

  /* Nothing decoded yet. */
  FAILS(NT_STATUS_INVALID_STATE, nt_get_logits(ctx, -1, &logits));
  /* Wrong arguments, each refused before anything runs. */
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_decode(NULL, batch));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_decode(ctx, NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_decode(ctx, batch)); /* empty */
  nt_batch_add(batch, vocab, 0, 0, true);
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_decode(ctx, batch));
  nt_batch_clear(batch);
  nt_batch_add(batch, -1, 0, 0, true);
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_decode(ctx, batch));
  nt_batch_clear(batch);
  nt_batch_add(batch, 1, 0, 2, true); /* sequence 2 of 2 */
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_decode(ctx, batch));
  EXPECT(strstr(nt_last_error(), "sequence 2") != NULL);
  nt_batch_clear(batch);
  nt_batch_add(batch, 1, -1, 0, true);
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_decode(ctx, batch));
  nt_batch_clear(batch);
  nt_batch_add(batch, 1, 5, 0, true); /* the sequence is empty: it starts at 0 */
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_decode(ctx, batch));
  nt_batch_clear(batch);
  nt_batch_add(batch, 1, 0, 0, false);
  nt_batch_add(batch, 1, 2, 0, true); /* a gap */
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_decode(ctx, batch));
  nt_batch_clear(batch);
  nt_batch_add(batch, 1, 64, 0, true); /* past the context */
  FAILS(NT_STATUS_NO_MEMORY, nt_decode(ctx, batch));
  nt_batch_clear(batch);
  for (int32_t i = 0; i < 513; ++i) nt_batch_add(batch, 1, i, 0, false); /* over n_batch */
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_decode(ctx, batch));
  nt_pos len = -1;
  OK(nt_seq_length(ctx, 0, &len));
  EXPECT(len == 0);

  /* The prompt, then its logits. */
  OK(decode_prompt(ctx, batch, prompt, n_prompt, 0));
  OK(nt_seq_length(ctx, 0, &len));
  EXPECT(len == n_prompt);
  OK(nt_get_logits(ctx, -1, &logits));
  const float* same = NULL;
  OK(nt_get_logits(ctx, n_prompt - 1, &same));
  EXPECT(logits == same);
  FAILS(NT_STATUS_INVALID_STATE, nt_get_logits(ctx, 0, &same)); /* asked for none */
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_get_logits(ctx, n_prompt, &same));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_get_logits(ctx, -2, &same));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_get_logits(ctx, -1, NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_get_logits(NULL, -1, &same));
  const int first = argmax(logits, vocab);
  float first_row[4096];
  EXPECT(vocab <= 4096);
  memcpy(first_row, logits, sizeof(float) * (size_t)vocab);

  /* Greedy through a chain picks the row's highest logit. */
  nt_sampler* chain;
  OK(nt_sampler_chain_new(&chain));
  nt_token t = -1;
  FAILS(NT_STATUS_INVALID_STATE, nt_sampler_sample(chain, ctx, -1, &t)); /* no dist or greedy yet */
  OK(nt_sampler_chain_add_greedy(chain));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_top_k(chain, 4)); /* after the end */
  OK(nt_sampler_sample(chain, ctx, -1, &t));
  EXPECT(t == first);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_sample(NULL, ctx, -1, &t));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_sample(chain, NULL, -1, &t));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_sample(chain, ctx, -1, NULL));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_sampler_sample(chain, ctx, 99, &t));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_sampler_accept(chain, vocab));
  OK(nt_sampler_reset(chain));
  OK(nt_sampler_free(chain));

  /* Two sequences in one batch, entries interleaved: sequence 1 gets the
   * prompt, sequence 0 its next token; each row is what it is alone. */
  nt_batch_clear(batch);
  for (int32_t i = 0; i < n_prompt; ++i) {
    nt_batch_add(batch, prompt[i], i, 1, i == n_prompt - 1);
    if (i == 0) nt_batch_add(batch, first, n_prompt, 0, true);
  }
  OK(nt_decode(ctx, batch));
  OK(nt_get_logits(ctx, n_prompt, &logits)); /* sequence 1's prompt row: entry n_prompt */
  int same_row = 1;
  for (int32_t v = 0; v < vocab; ++v) same_row &= logits[v] == first_row[v];
  EXPECT(same_row);
  OK(nt_seq_length(ctx, 0, &len));
  EXPECT(len == n_prompt + 1);
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == n_prompt);

  /* Sequence operations. */
  FAILS(NT_STATUS_UNSUPPORTED, nt_seq_rm(ctx, 0, 1, 2)); /* a hole */
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_seq_rm(ctx, 2, 0, -1));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_rm(NULL, 0, 0, -1));
  OK(nt_seq_rm(ctx, 0, n_prompt, -1));
  OK(nt_seq_length(ctx, 0, &len));
  EXPECT(len == n_prompt);
  OK(nt_seq_rm(ctx, 0, 3, 2)); /* an empty range: nothing */
  OK(nt_seq_length(ctx, 0, &len));
  EXPECT(len == n_prompt);
  OK(nt_seq_cp(ctx, 0, 1, 0, 2));
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == 2);
  FAILS(NT_STATUS_UNSUPPORTED, nt_seq_cp(ctx, 0, 1, 1, -1));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_seq_cp(ctx, 0, 5, 0, -1));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_seq_cp(ctx, -3, 1, 0, -1));
  OK(nt_seq_cp(ctx, 0, 1, -1, -1));
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == n_prompt);
  /* The copy continues as the original would. */
  nt_batch_clear(batch);
  nt_batch_add(batch, first, n_prompt, 1, true);
  OK(nt_decode(ctx, batch));
  OK(nt_get_logits(ctx, 0, &logits));
  const int second = argmax(logits, vocab);
  OK(nt_seq_keep(ctx, 1));
  OK(nt_seq_length(ctx, 0, &len));
  EXPECT(len == 0);
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_seq_keep(ctx, 7));
  const float* kept = NULL;
  OK(nt_get_logits(ctx, -1, &kept)); /* the last pass's logits stay until the next nt_decode */
  EXPECT(kept == logits);
  OK(nt_seq_rm(ctx, -1, 0, -1));
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == 0);
  OK(decode_prompt(ctx, batch, prompt, n_prompt, 0));
  OK(nt_memory_clear(ctx));
  OK(nt_seq_length(ctx, 0, &len));
  EXPECT(len == 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_memory_clear(NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_keep(NULL, 0));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_cp(NULL, 0, 1, 0, -1));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_length(ctx, 0, NULL));

  /* The greedy continuation starts with the two tokens found above. */
  nt_token out[16];
  const int32_t got = greedy(model, ctx, prompt, n_prompt, 16, out);
  EXPECT(got >= 2 && out[0] == first && out[1] == second);

  /* Counters. */
  nt_counters k;
  OK(nt_context_get_counters(ctx, &k));
  EXPECT(k.passes > 0 && k.tokens > 0 && k.weight_bytes_per_token > 0 && k.kv_bytes_per_position > 0 && k.seconds >= 0);
  OK(nt_context_reset_counters(ctx));
  OK(nt_context_get_counters(ctx, &k));
  EXPECT(k.passes == 0 && k.tokens == 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_get_counters(NULL, &k));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_context_get_counters(ctx, NULL));

  /* The model outlives its contexts. */
  FAILS(NT_STATUS_INVALID_STATE, nt_model_free(model));
  nt_batch_free(batch);
  OK(nt_context_free(ctx));
}

/* A pool that holds the batch exactly: two sequences of one 32-position page
 * each, sharing the prompt's page; a step of both copies it once (the last
 * to write keeps the original). */
static void test_shared_page_fits(nt_model* model) {
  nt_context* ctx = new_context(model, 32, 2, NT_KV_F16);
  nt_token prompt[32];
  int32_t n = 0;
  OK(nt_tokenize(model, "Once upon a time", -1, prompt, 32, true, false, &n));
  nt_batch* batch;
  OK(nt_batch_init(32, &batch));
  OK(decode_prompt(ctx, batch, prompt, n, 0));
  OK(nt_seq_cp(ctx, 0, 1, 0, -1));
  for (nt_pos pos = n; pos < 32; ++pos) {
    nt_batch_clear(batch);
    nt_batch_add(batch, prompt[1], pos, 0, true);
    nt_batch_add(batch, prompt[2], pos, 1, true);
    OK(nt_decode(ctx, batch));
  }
  nt_pos len = 0;
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == 32);
  nt_batch_free(batch);
  nt_context_free(ctx);
}

static void test_sampler_chain(nt_model* model) {
  nt_sampler* chain = NULL;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_new(NULL));
  OK(nt_sampler_chain_new(&chain));
  OK(nt_sampler_chain_add_penalties(chain, 64, 1.1f, 0.0f, 0.0f));
  OK(nt_sampler_chain_add_top_k(chain, 40));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_top_k(chain, 20)); /* twice */
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_penalties(chain, 64, 1.1f, 0, 0)); /* out of order */
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_top_p(chain, 1.5f));
  OK(nt_sampler_chain_add_top_p(chain, 0.9f));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_min_p(chain, -0.5f));
  OK(nt_sampler_chain_add_min_p(chain, 0.05f));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_temp(chain, NAN));
  OK(nt_sampler_chain_add_temp(chain, 0.8f));
  OK(nt_sampler_chain_add_dist(chain, 42));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_greedy(chain));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_top_k(NULL, 1));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_accept(NULL, 1));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_sampler_accept(chain, -1));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_reset(NULL));
  OK(nt_sampler_free(NULL));

  /* The same seed and logits give the same tokens; reset replays them. */
  nt_context* ctx = new_context(model, 64, 1, NT_KV_F16);
  nt_token prompt[64];
  int32_t n_prompt = 0;
  OK(nt_tokenize(model, "The cat", -1, prompt, 64, true, false, &n_prompt));
  nt_batch* batch;
  OK(nt_batch_init(64, &batch));
  OK(decode_prompt(ctx, batch, prompt, n_prompt, 0));
  for (int32_t i = 0; i < n_prompt; ++i) OK(nt_sampler_accept(chain, prompt[i]));
  nt_token a[8], b[8];
  for (int i = 0; i < 8; ++i) OK(nt_sampler_sample(chain, ctx, -1, &a[i]));
  OK(nt_sampler_reset(chain));
  for (int32_t i = 0; i < n_prompt; ++i) OK(nt_sampler_accept(chain, prompt[i]));
  for (int i = 0; i < 8; ++i) OK(nt_sampler_sample(chain, ctx, -1, &b[i]));
  EXPECT(memcmp(a, b, sizeof a) == 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_sampler_chain_add_dist(chain, 1));
  nt_sampler_free(chain);
  nt_batch_free(batch);
  nt_context_free(ctx);
}

static void test_state(nt_model* model) {
  nt_context* ctx = new_context(model, 128, 2, NT_KV_F16);
  int32_t vocab;
  OK(nt_vocab_size(model, &vocab));
  nt_token prompt[64];
  int32_t n_prompt = 0;
  OK(nt_tokenize(model, "Lily and Ben went to the park", -1, prompt, 64, true, false, &n_prompt));
  nt_batch* batch;
  OK(nt_batch_init(64, &batch));
  OK(decode_prompt(ctx, batch, prompt, n_prompt, 0));
  const float* logits;
  OK(nt_get_logits(ctx, -1, &logits));
  const nt_token next = (nt_token)argmax(logits, vocab);
  /* The reference: the row after `next`. */
  nt_batch_clear(batch);
  nt_batch_add(batch, next, n_prompt, 0, true);
  OK(nt_decode(ctx, batch));
  OK(nt_get_logits(ctx, -1, &logits));
  float* expected = malloc(sizeof(float) * (size_t)vocab);
  memcpy(expected, logits, sizeof(float) * (size_t)vocab);
  OK(nt_seq_rm(ctx, 0, n_prompt, -1));

  size_t size = 0;
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_seq_state_save(ctx, 0, NULL, 0, &size));
  EXPECT(size > (size_t)n_prompt * 4);
  uint8_t* state = malloc(size);
  size_t written = 0;
  FAILS(NT_STATUS_BUFFER_TOO_SMALL, nt_seq_state_save(ctx, 0, state, size - 1, &written));
  OK(nt_seq_state_save(ctx, 0, state, size, &written));
  EXPECT(written == size);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_state_save(NULL, 0, state, size, &written));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_seq_state_save(ctx, 2, state, size, &written));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_state_save(ctx, 0, state, size, NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_state_save(ctx, 0, NULL, size, &written));

  /* Restored into another sequence, it continues exactly: the rows themselves came back. */
  OK(nt_memory_clear(ctx));
  OK(nt_seq_state_load(ctx, 1, state, size));
  nt_pos len = 0;
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == n_prompt);
  nt_batch_clear(batch);
  nt_batch_add(batch, next, n_prompt, 1, true);
  OK(nt_decode(ctx, batch));
  OK(nt_get_logits(ctx, -1, &logits));
  EXPECT(memcmp(logits, expected, sizeof(float) * (size_t)vocab) == 0);

  /* Damaged states are refused and leave the sequence empty. */
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_state_load(ctx, 1, state, size - 1));
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == 0);
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_state_load(ctx, 1, (const uint8_t*)"garbage", 7));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_state_load(ctx, 1, NULL, 0));
  FAILS(NT_STATUS_OUT_OF_RANGE, nt_seq_state_load(ctx, -1, state, size));

  /* Through a file. */
  char path[] = "/tmp/nt_capi_state_XXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0);
  close(fd);
  OK(nt_seq_state_save_file(ctx, 1, path)); /* an empty sequence saves too */
  OK(nt_seq_state_load(ctx, 0, state, size));
  OK(nt_seq_state_save_file(ctx, 0, path));
  OK(nt_memory_clear(ctx));
  OK(nt_seq_state_load_file(ctx, 1, path));
  OK(nt_seq_length(ctx, 1, &len));
  EXPECT(len == n_prompt);
  FAILS(NT_STATUS_NOT_FOUND, nt_seq_state_load_file(ctx, 1, "/nonexistent/state"));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_seq_state_load_file(ctx, 1, NULL));
  FAILS(NT_STATUS_ENGINE_ERROR, nt_seq_state_save_file(ctx, 1, "/nonexistent/dir/state"));
  unlink(path);

  /* Into a context whose cache is F32: the tokens are decoded again, which gives the same next token. */
  nt_context* f32 = new_context(model, 128, 1, NT_KV_F32);
  OK(nt_seq_state_load(f32, 0, state, size));
  OK(nt_seq_length(f32, 0, &len));
  EXPECT(len == n_prompt);
  nt_batch_clear(batch);
  nt_batch_add(batch, next, n_prompt, 0, true);
  OK(nt_decode(f32, batch));
  OK(nt_get_logits(f32, -1, &logits));
  EXPECT(argmax(logits, vocab) == argmax(expected, vocab));
  nt_counters k;
  OK(nt_context_get_counters(f32, &k));
  EXPECT(k.passes == 2); /* the re-decode and the step */
  nt_context_free(f32);

  free(state);
  free(expected);
  nt_batch_free(batch);
  nt_context_free(ctx);
}

/* Requests: text from the engine facade, by poll and by callback. */
typedef struct {
  char text[4096];
  size_t length;
  int calls;
  int stop_after; /* > 0: return false at this call */
} Collected;

static bool collect(nt_request_id id, const char* text, size_t len, void* user_data) {
  (void)id;
  Collected* c = user_data;
  if (c->length + len < sizeof c->text) {
    memcpy(c->text + c->length, text, len);
    c->length += len;
  }
  ++c->calls;
  return c->stop_after <= 0 || c->calls < c->stop_after;
}

/* Polls a request to its end, collecting its text; returns its last status. */
static nt_status poll_to_end(nt_context* ctx, nt_request_id id, char* text, size_t size, nt_request_status* st) {
  size_t at = 0;
  for (;;) {
    char buf[7]; /* small on purpose: the text comes in several polls, whole characters each */
    size_t n = 0;
    nt_status s = nt_request_poll(ctx, id, 1000, buf, sizeof buf, &n, st);
    if (s != NT_STATUS_OK) return s;
    EXPECT(buf[n] == '\0' && n < sizeof buf);
    if (at + n < size) {
      memcpy(text + at, buf, n);
      at += n;
      text[at] = '\0';
    }
    if (st->state == NT_REQUEST_DONE) return NT_STATUS_OK;
  }
}

static void test_requests(nt_model* model) {
  nt_context* ctx = new_context(model, 256, 2, NT_KV_F16);
  nt_request_params rp = nt_request_default_params();
  EXPECT(rp.max_tokens == 256 && rp.temperature > 0.7f && rp.top_k == 40);
  rp.temperature = 0;
  rp.max_tokens = 24;
  nt_request_id id = 0;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(NULL, "Once", NULL, &rp, &id));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, NULL, NULL, &rp, &id));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, "Once", "[]", &rp, &id));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, "Once", NULL, NULL, &id));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, "Once", NULL, &rp, NULL));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, NULL, "{not json", &rp, &id));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, NULL, "[{\"role\": \"user\"}]", &rp, &id));
  nt_request_params bad = rp;
  bad.top_p = 3;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, "Once", NULL, &bad, &id));
  EXPECT(strstr(nt_last_error(), "top_p") != NULL);
  bad = rp;
  bad.n_stop = 2;
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_submit(ctx, "Once", NULL, &bad, &id));

  /* The batch API's greedy text of the same prompt is the reference. */
  nt_token prompt[64], out[24];
  int32_t n_prompt = 0;
  OK(nt_tokenize(model, "Once upon a time", -1, prompt, 64, true, false, &n_prompt));
  const int32_t n_out = greedy(model, ctx, prompt, n_prompt, 24, out);
  char expected[4096] = {0};
  size_t at = 0;
  for (int32_t i = 0; i < n_out; ++i) {
    int32_t n = 0;
    OK(nt_token_to_piece(model, out[i], false, expected + at, (int32_t)(sizeof expected - at - 1), &n));
    at += (size_t)n;
  }
  /* Requests start on an empty context. */
  FAILS(NT_STATUS_INVALID_STATE, nt_request_submit(ctx, "Once upon a time", NULL, &rp, &id));
  OK(nt_memory_clear(ctx));

  OK(nt_request_submit(ctx, "Once upon a time", NULL, &rp, &id));
  nt_request_status st;
  char text[4096] = {0};
  OK(poll_to_end(ctx, id, text, sizeof text, &st));
  EXPECT(strcmp(text, expected) == 0);
  EXPECT(st.state == NT_REQUEST_DONE);
  EXPECT(st.stop == (n_out == 24 ? NT_STOP_TOKEN_LIMIT : NT_STOP_END_OF_TEXT));
  EXPECT(st.prompt_tokens == n_prompt && st.completion_tokens == n_out);
  size_t n = 0;
  FAILS(NT_STATUS_NOT_FOUND, nt_request_poll(ctx, id, 0, text, sizeof text, &n, &st)); /* forgotten */
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_poll(NULL, id, 0, text, sizeof text, &n, &st));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_poll(ctx, id, 0, text, 0, &n, &st));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_poll(ctx, id, -5, text, sizeof text, &n, &st));
  FAILS(NT_STATUS_NOT_FOUND, nt_request_cancel(ctx, 12345));
  FAILS(NT_STATUS_INVALID_ARGUMENT, nt_request_cancel(NULL, id));

  /* The batch API is closed now. */
  nt_batch* batch;
  OK(nt_batch_init(8, &batch));
  nt_batch_add(batch, prompt[0], 0, 0, true);
  FAILS(NT_STATUS_INVALID_STATE, nt_decode(ctx, batch));
  FAILS(NT_STATUS_INVALID_STATE, nt_memory_clear(ctx));
  FAILS(NT_STATUS_INVALID_STATE, nt_seq_rm(ctx, 0, 0, -1));
  nt_batch_free(batch);

  /* Two at once, one through a callback that stops it after 3 pieces, with a stop string in the other. */
  Collected c;
  memset(&c, 0, sizeof c);
  c.stop_after = 3;
  nt_request_params cb = rp;
  cb.max_tokens = -1;
  cb.ignore_eos = true;
  cb.on_text = collect;
  cb.user_data = &c;
  nt_request_id a, b;
  OK(nt_request_submit(ctx, "Once upon a time", NULL, &cb, &a));
  /* A stop string from the middle of the greedy text. */
  EXPECT(strlen(expected) > 9);
  char stop_text[4] = {0};
  memcpy(stop_text, expected + 6, 3);
  const char* stop_list[] = {stop_text};
  nt_request_params stop = rp;
  stop.stop = stop_list;
  stop.n_stop = 1;
  OK(nt_request_submit(ctx, "Once upon a time", NULL, &stop, &b));
  nt_request_status sa, sb;
  char ta[4096] = {0}, tb[4096] = {0};
  OK(poll_to_end(ctx, a, ta, sizeof ta, &sa));
  OK(poll_to_end(ctx, b, tb, sizeof tb, &sb));
  /* Cancelled at the step after the third piece (text held back then may follow). */
  EXPECT(sa.stop == NT_STOP_CANCELLED && c.calls >= 3 && sa.completion_tokens < 10 && ta[0] == '\0');
  EXPECT(sb.stop == NT_STOP_STOP_STRING);
  EXPECT(strncmp(tb, expected, strlen(tb)) == 0 && strstr(tb, stop_text) == NULL);

  /* Cancelled while running, and a conversation through the template. */
  nt_request_params longer = rp;
  longer.max_tokens = -1;
  longer.ignore_eos = true;
  OK(nt_request_submit(ctx, "Once upon a time", NULL, &longer, &a));
  OK(nt_request_cancel(ctx, a));
  OK(poll_to_end(ctx, a, ta, sizeof ta, &sa));
  EXPECT(sa.stop == NT_STOP_CANCELLED);
  OK(nt_request_submit(ctx, NULL, "[{\"role\": \"user\", \"content\": \"Hi\"}]", &rp, &b));
  OK(poll_to_end(ctx, b, tb, sizeof tb, &sb));
  EXPECT(sb.state == NT_REQUEST_DONE && sb.prompt_tokens > 1);

  /* Polling the state alone: kept text waits for a poll with a buffer. */
  OK(nt_request_submit(ctx, "Once", NULL, &rp, &a));
  OK(nt_request_poll(ctx, a, 200, NULL, 0, NULL, &sa));
  OK(poll_to_end(ctx, a, ta, sizeof ta, &sa));
  EXPECT(ta[0] != '\0' && sa.state == NT_REQUEST_DONE);
  memset(&c, 0, sizeof c);
  nt_request_params with_callback = rp;
  with_callback.on_text = collect;
  with_callback.user_data = &c;
  OK(nt_request_submit(ctx, "Once", NULL, &with_callback, &a));
  do {
    OK(nt_request_poll(ctx, a, 100, NULL, 0, NULL, &sa));
  } while (sa.state != NT_REQUEST_DONE);
  EXPECT(c.length > 0 && strncmp(c.text, ta, c.length) == 0);

  nt_counters k;
  OK(nt_context_get_counters(ctx, &k));
  EXPECT(k.passes > 0 && k.generated_tokens > 0 && k.prompt_tokens > 0);

  /* Freed with a request running: it is cancelled, the thread joined. */
  OK(nt_request_submit(ctx, "Once upon a time", NULL, &longer, &a));
  OK(nt_context_free(ctx));
}

/* The abort callback: a flag another thread (here, the callback itself) raises. */
typedef struct {
  atomic_int calls;
  atomic_int abort_at;
} AbortState;

static bool abort_after(void* user_data) {
  AbortState* s = user_data;
  return atomic_fetch_add(&s->calls, 1) + 1 >= atomic_load(&s->abort_at);
}

static bool refuse_progress(float progress, void* user_data) {
  (void)user_data;
  return progress < 0.5f;
}

static void test_callbacks(void) {
  /* The progress callback cancels the load. */
  nt_model_params mp = nt_model_default_params();
  mp.path = g_model_path;
  mp.device = NT_DEVICE_CPU;
  mp.progress_callback = refuse_progress;
  nt_model* model;
  OK(nt_model_load(&mp, &model));
  nt_context_params cp = nt_context_default_params();
  cp.n_threads = 1;
  nt_context* ctx = NULL;
  FAILS(NT_STATUS_ABORTED, nt_context_new(model, &cp, &ctx));
  EXPECT(ctx == NULL);
  OK(nt_model_free(model));

  /* The abort callback stops nt_decode before its pass, and a long request. */
  AbortState s;
  atomic_init(&s.calls, 0);
  atomic_init(&s.abort_at, 3);
  mp.progress_callback = NULL;
  mp.abort_callback = abort_after;
  mp.abort_user_data = &s;
  OK(nt_model_load(&mp, &model));
  ctx = new_context(model, 64, 1, NT_KV_F16); /* the load asks once */
  nt_batch* batch;
  OK(nt_batch_init(8, &batch));
  nt_token bos = 1;
  nt_token_bos(model, &bos);
  nt_batch_add(batch, bos >= 0 ? bos : 1, 0, 0, true);
  OK(nt_decode(ctx, batch));
  FAILS(NT_STATUS_ABORTED, nt_decode(ctx, batch));
  nt_batch_free(batch);
  nt_context_free(ctx);

  atomic_store(&s.calls, 0);
  atomic_store(&s.abort_at, 1 << 30);
  ctx = new_context(model, 0, 1, NT_KV_F16); /* the model's whole context */
  uint32_t n_ctx = 0;
  OK(nt_n_ctx(ctx, &n_ctx));
  EXPECT(n_ctx >= 256);
  nt_request_params rp = nt_request_default_params();
  rp.max_tokens = -1; /* until the context is full: hundreds of passes */
  rp.ignore_eos = true;
  /* The request thread starts with the request and asks before each pass: a few passes in, it aborts. */
  atomic_store(&s.abort_at, atomic_load(&s.calls) + 20);
  nt_request_id id;
  OK(nt_request_submit(ctx, "Once upon a time", NULL, &rp, &id));
  nt_request_status st;
  char text[8192];
  OK(poll_to_end(ctx, id, text, sizeof text, &st));
  EXPECT(st.stop == NT_STOP_CANCELLED);
  EXPECT(st.completion_tokens < (int32_t)n_ctx / 2);
  nt_context_free(ctx);
  nt_model_free(model);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  g_model_path = argv[1];
  test_library();
  test_model_errors();
  nt_model* model = load_model();
  test_vocabulary(model);
  test_text(model);
  test_chat_template(model);
  test_plan(model);
  test_context_errors(model);
  test_batch_errors();
  test_decode(model);
  test_shared_page_fits(model);
  test_sampler_chain(model);
  test_state(model);
  test_requests(model);
  OK(nt_model_free(model));
  test_callbacks();
  printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
