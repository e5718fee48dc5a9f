// Greedy decoding as generation runs it, for the GPU tests that compare
// other paths against it.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/batch.h"
#include "runtime/model_runner.h"

namespace nt::test {

// The prompt's pick, then decode_greedy feeding each pick back on the device.
inline std::vector<int32_t> greedy_decode(ModelRunner& runner, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out = {runner.forward_greedy(prompt, 0)};
  runner.decode_greedy(out[0], int64_t(prompt.size()), n - 1, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  return out;
}

// Each prompt prefilled on a sequence of its own, then every step one batch
// of all the sequences' last picks.
inline std::vector<std::vector<int32_t>> decoded_together(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                                                   int n) {
  std::vector<SeqId> seqs;
  std::vector<std::vector<int32_t>> picks(prompts.size());
  Batch batch;
  BatchOutputs out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs.push_back(runner.seq_alloc());
    batch.clear();
    batch.add_run(prompts[i], 0, seqs[i], Output::Argmax);
    runner.forward(batch, out);
    picks[i].push_back(out.argmax[0]);
  }
  for (int step = 1; step < n; ++step) {
    batch.clear();
    for (size_t i = 0; i < prompts.size(); ++i) batch.add(picks[i].back(), int64_t(prompts[i].size()) + step - 1, seqs[i], Output::Argmax);
    runner.forward(batch, out);
    for (size_t i = 0; i < prompts.size(); ++i) picks[i].push_back(out.argmax[i]);
  }
  for (const SeqId s : seqs) runner.seq_free(s);
  return picks;
}

}  // namespace nt::test
