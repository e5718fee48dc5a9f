/* simple MODEL [PROMPT] [N]: greedy decoding through the C API.
 *
 * Loads MODEL, tokenizes PROMPT as raw text (no chat template), decodes it in
 * one pass, then picks the highest logit N times (default 64), stopping
 * early at an end-of-generation token, and prints only the continuation.
 *
 *   cc simple.c $(pkg-config --cflags --libs ntransformer) -o simple
 */
#include <ntransformer.h>

#include <stdio.h>
#include <stdlib.h>

/* Prints the library's message for a failed call and exits. */
static void check(nt_status status, const char* what) {
  if (status == NT_STATUS_OK) return;
  fprintf(stderr, "simple: %s: %s (%s)\n", what, nt_last_error(), nt_status_name(status));
  exit(1);
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: %s MODEL [PROMPT] [N]\n", argv[0]);
    return 2;
  }
  const char* prompt = argc > 2 ? argv[2] : "Once upon a time";
  const int n_predict = argc > 3 ? atoi(argv[3]) : 64;

  nt_model_params mp = nt_model_default_params();
  mp.path = argv[1];
  nt_model* model;
  check(nt_model_load(&mp, &model), "loading the model");

  /* The prompt's tokens: ask the count first, then fill a buffer that size. */
  int32_t n_prompt = 0;
  nt_status status = nt_tokenize(model, prompt, -1, NULL, 0, true, false, &n_prompt);
  if (status != NT_STATUS_BUFFER_TOO_SMALL) check(status, "tokenizing the prompt");
  n_prompt = -n_prompt;
  nt_token* tokens = malloc(sizeof(nt_token) * (size_t)(n_prompt > 0 ? n_prompt : 1));
  check(nt_tokenize(model, prompt, -1, tokens, n_prompt, true, false, &n_prompt), "tokenizing the prompt");
  if (n_prompt == 0) {
    fprintf(stderr, "simple: the prompt has no tokens\n");
    return 1;
  }

  nt_context_params cp = nt_context_default_params();
  cp.n_ctx = (uint32_t)(n_prompt + n_predict);
  if (cp.n_batch < (uint32_t)n_prompt) cp.n_batch = (uint32_t)n_prompt;
  nt_context* ctx;
  check(nt_context_new(model, &cp, &ctx), "making the context");

  nt_sampler* greedy;
  check(nt_sampler_chain_new(&greedy), "making the sampler");
  check(nt_sampler_chain_add_greedy(greedy), "making the sampler");

  /* The whole prompt in one pass, logits for its last token only. */
  nt_batch* batch;
  check(nt_batch_init((int32_t)cp.n_batch, &batch), "making the batch");
  for (int32_t i = 0; i < n_prompt; ++i) check(nt_batch_add(batch, tokens[i], i, 0, i == n_prompt - 1), "filling the batch");

  char piece[256];
  for (int32_t pos = n_prompt; pos < n_prompt + n_predict; ++pos) {
    check(nt_decode(ctx, batch), "decoding");
    nt_token next;
    check(nt_sampler_sample(greedy, ctx, -1, &next), "sampling");
    bool end;
    check(nt_token_is_eog(model, next, &end), "checking the token");
    if (end) break;
    int32_t n = 0;
    check(nt_token_to_piece(model, next, false, piece, (int32_t)sizeof piece, &n), "decoding the token");
    fwrite(piece, 1, (size_t)n, stdout);
    fflush(stdout);
    check(nt_batch_clear(batch), "clearing the batch");
    check(nt_batch_add(batch, next, pos, 0, true), "filling the batch");
  }
  putchar('\n');

  nt_batch_free(batch);
  nt_sampler_free(greedy);
  nt_context_free(ctx);
  nt_model_free(model);
  free(tokens);
  return 0;
}
