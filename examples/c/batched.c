/* batched MODEL [PROMPT] [N]: four continuations of one prompt, decoded
 * together: one batch per step holds a token of each sequence.
 *
 * The prompt is decoded once into sequence 0 and its cache shared with
 * sequences 1-3 (nt_seq_cp); each sequence then samples with a seed of its
 * own (temperature 0.8, top-k 40), so the four stories part ways.
 *
 *   cc batched.c $(pkg-config --cflags --libs ntransformer) -o batched
 */
#include <ntransformer.h>

#include <stdio.h>
#include <stdlib.h>

enum { kSequences = 4, kTextBytes = 1 << 16 };

static void check(nt_status status, const char* what) {
  if (status == NT_STATUS_OK) return;
  fprintf(stderr, "batched: %s: %s (%s)\n", what, nt_last_error(), nt_status_name(status));
  exit(1);
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: %s MODEL [PROMPT] [N]\n", argv[0]);
    return 2;
  }
  const char* prompt = argc > 2 ? argv[2] : "Once upon a time";
  const int n_predict = argc > 3 ? atoi(argv[3]) : 32;

  nt_model_params mp = nt_model_default_params();
  mp.path = argv[1];
  nt_model* model;
  check(nt_model_load(&mp, &model), "loading the model");

  nt_token tokens[512];
  int32_t n_prompt = 0;
  check(nt_tokenize(model, prompt, -1, tokens, 512, true, false, &n_prompt), "tokenizing the prompt");

  nt_context_params cp = nt_context_default_params();
  cp.n_ctx = (uint32_t)(n_prompt + n_predict);
  cp.n_seq_max = kSequences;
  nt_context* ctx;
  check(nt_context_new(model, &cp, &ctx), "making the context");

  nt_batch* batch;
  check(nt_batch_init(n_prompt > kSequences ? n_prompt : kSequences, &batch), "making the batch");
  for (int32_t i = 0; i < n_prompt; ++i) check(nt_batch_add(batch, tokens[i], i, 0, i == n_prompt - 1), "filling the batch");
  check(nt_decode(ctx, batch), "decoding the prompt");
  for (nt_seq_id s = 1; s < kSequences; ++s) check(nt_seq_cp(ctx, 0, s, 0, -1), "sharing the prompt");

  nt_sampler* samplers[kSequences];
  char* texts[kSequences];
  size_t lengths[kSequences] = {0};
  bool done[kSequences] = {false};
  int32_t entry[kSequences];  /* each sequence's entry in the step's batch */
  for (int s = 0; s < kSequences; ++s) {
    check(nt_sampler_chain_new(&samplers[s]), "making a sampler");
    check(nt_sampler_chain_add_top_k(samplers[s], 40), "making a sampler");
    check(nt_sampler_chain_add_temp(samplers[s], 0.8f), "making a sampler");
    check(nt_sampler_chain_add_dist(samplers[s], 1234u + (uint64_t)s), "making a sampler");
    texts[s] = calloc(kTextBytes, 1);
    entry[s] = n_prompt - 1;  /* all sample the prompt's last row first */
  }

  int running = kSequences;
  for (int32_t pos = n_prompt; pos < n_prompt + n_predict && running > 0; ++pos) {
    nt_token picks[kSequences];
    for (int s = 0; s < kSequences; ++s) {
      if (done[s]) continue;
      check(nt_sampler_sample(samplers[s], ctx, entry[s], &picks[s]), "sampling");
      bool end;
      check(nt_token_is_eog(model, picks[s], &end), "checking a token");
      if (end) {
        done[s] = true;
        --running;
        continue;
      }
      int32_t n = 0;
      if (nt_token_to_piece(model, picks[s], false, texts[s] + lengths[s], (int32_t)(kTextBytes - 1 - lengths[s]), &n) ==
          NT_STATUS_OK) {
        lengths[s] += (size_t)n;
      }
    }
    /* The next step: one token of each running sequence. */
    check(nt_batch_clear(batch), "clearing the batch");
    int32_t size = 0;
    for (int s = 0; s < kSequences; ++s) {
      if (done[s]) continue;
      check(nt_batch_add(batch, picks[s], pos, s, true), "filling the batch");
      entry[s] = size++;
    }
    if (size == 0 || pos + 1 == n_prompt + n_predict) break;
    check(nt_decode(ctx, batch), "decoding a step");
  }

  nt_counters counters;
  check(nt_context_get_counters(ctx, &counters), "reading the counters");
  for (int s = 0; s < kSequences; ++s) {
    printf("[%d] %s%s\n", s, prompt, texts[s]);
    free(texts[s]);
    nt_sampler_free(samplers[s]);
  }
  fprintf(stderr, "%lld passes, %lld tokens decoded in %.2f s\n", (long long)counters.passes, (long long)counters.tokens,
          counters.seconds);
  nt_batch_free(batch);
  nt_context_free(ctx);
  nt_model_free(model);
  return 0;
}
