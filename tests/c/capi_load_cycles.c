/* capi_load_cycles MODEL.gguf [N]: loads a model and a context, decodes a
 * prompt and a few tokens, and frees them, N times (default 50); then aborts
 * a generation that would fill the context through the abort callback. Run
 * under AddressSanitizer (scripts/sanitize_capi.sh), a leak or a bad access
 * in any of it fails the run. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "ntransformer.h"

static void check(nt_status status, const char* what) {
  if (status == NT_STATUS_OK) return;
  fprintf(stderr, "capi_load_cycles: %s: %s (%s)\n", what, nt_last_error(), nt_status_name(status));
  exit(1);
}

static atomic_int g_stop_after;  /* abort once this many more passes have been asked about */

static bool abort_when_due(void* user_data) {
  (void)user_data;
  return atomic_fetch_sub(&g_stop_after, 1) <= 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.gguf [N]\n", argv[0]);
    return 2;
  }
  const int cycles = argc > 2 ? atoi(argv[2]) : 50;
  nt_model_params mp = nt_model_default_params();
  mp.path = argv[1];
  mp.device = NT_DEVICE_CPU;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    nt_model* model;
    check(nt_model_load(&mp, &model), "loading");
    nt_context_params cp = nt_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    nt_context* ctx;
    check(nt_context_new(model, &cp, &ctx), "making a context");
    nt_token tokens[32];
    int32_t n = 0;
    check(nt_tokenize(model, "Once upon a time", -1, tokens, 32, true, false, &n), "tokenizing");
    nt_batch* batch;
    check(nt_batch_init(32, &batch), "making a batch");
    for (int32_t i = 0; i < n; ++i) check(nt_batch_add(batch, tokens[i], i, 0, i == n - 1), "filling the batch");
    nt_sampler* chain;
    check(nt_sampler_chain_new(&chain), "making a sampler");
    check(nt_sampler_chain_add_greedy(chain), "making a sampler");
    for (int32_t pos = n; pos < n + 4; ++pos) {
      check(nt_decode(ctx, batch), "decoding");
      nt_token t;
      check(nt_sampler_sample(chain, ctx, -1, &t), "sampling");
      check(nt_batch_clear(batch), "clearing the batch");
      check(nt_batch_add(batch, t, pos, 0, true), "filling the batch");
    }
    /* A wrong call leaves a message, and nothing else, behind. */
    if (nt_decode(ctx, NULL) != NT_STATUS_INVALID_ARGUMENT) return 1;
    nt_sampler_free(chain);
    nt_batch_free(batch);
    check(nt_context_free(ctx), "freeing the context");
    check(nt_model_free(model), "freeing the model");
  }

  /* A long generation, ended by the abort callback. */
  atomic_store(&g_stop_after, 1 << 30);
  mp.abort_callback = abort_when_due;
  nt_model* model;
  check(nt_model_load(&mp, &model), "loading");
  nt_context_params cp = nt_context_default_params();
  cp.n_threads = 1;
  nt_context* ctx;
  check(nt_context_new(model, &cp, &ctx), "making a context");
  nt_request_params rp = nt_request_default_params();
  rp.max_tokens = -1;
  rp.ignore_eos = true;
  atomic_store(&g_stop_after, 10);  /* the request thread asks before each pass */
  nt_request_id id;
  check(nt_request_submit(ctx, "Once upon a time", NULL, &rp, &id), "submitting");
  nt_request_status status;
  char text[4096];
  size_t length;
  do {
    check(nt_request_poll(ctx, id, 1000, text, sizeof text, &length, &status), "polling");
  } while (status.state != NT_REQUEST_DONE);
  check(nt_context_free(ctx), "freeing the context");
  check(nt_model_free(model), "freeing the model");
  if (status.stop != NT_STOP_CANCELLED) {
    fprintf(stderr, "capi_load_cycles: the aborted generation ended otherwise (%d)\n", (int)status.stop);
    return 1;
  }
  printf("%d load/free cycles; a generation aborted after %d tokens\n", cycles, status.completion_tokens);
  return 0;
}
