#include "runtime/batch.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace nt {

void Batch::add_run(std::span<const int32_t> tokens, int64_t pos, SeqId seq, Output last_output) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    add(tokens[i], pos + int64_t(i), seq, i + 1 == tokens.size() ? last_output : Output::None);
  }
}

std::vector<SequenceRun> sequence_runs(const Batch& batch) {
  std::vector<SequenceRun> runs;
  std::unordered_set<SeqId> seen;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const BatchEntry& e = batch.entries[i];
    if (e.pos < 0) fail("batch entry {}: position {} is negative", i, e.pos);
    if (!runs.empty() && runs.back().seq == e.seq) {
      SequenceRun& run = runs.back();
      const int64_t index = run.count;  // e's index within the run
      if (e.parent < -1 || e.parent >= index) {
        fail("batch entry {}: its parent {} is not an earlier entry of sequence {}'s run (0 to {}, or -1 for the "
             "entry before it)",
             i, e.parent, e.seq, index - 1);
      }
      const bool follows_previous = e.parent == -1 || e.parent == index - 1;
      const int64_t parent_pos = batch.entries[size_t(run.first + (follows_previous ? index - 1 : e.parent))].pos;
      if (e.pos != parent_pos + 1) {
        if (follows_previous) {
          fail("batch entry {}: sequence {} jumps from position {} to {}; a sequence's entries take consecutive "
               "positions",
               i, e.seq, parent_pos, e.pos);
        }
        fail("batch entry {}: sequence {}'s tree entry is at position {}, not its parent's ({}) plus one", i, e.seq,
             e.pos, parent_pos);
      }
      if (e.stepwise != run.stepwise) {
        fail("batch entry {}: sequence {} mixes stepwise and chunked entries in one run", i, e.seq);
      }
      run.tree = run.tree || !follows_previous;
      ++run.count;
      continue;
    }
    if (!seen.insert(e.seq).second) {
      fail("batch entry {}: sequence {} appears again after other sequences; its entries must be contiguous", i, e.seq);
    }
    if (e.parent != -1) {
      fail("batch entry {}: the first entry of sequence {}'s run follows its cached positions, so its parent is -1, "
           "not {}",
           i, e.seq, e.parent);
    }
    runs.push_back({e.seq, int64_t(i), 1, e.pos, e.stepwise, false});
  }
  return runs;
}

void tree_path(const Batch& batch, const SequenceRun& run, int64_t entry, std::vector<int32_t>& path) {
  path.clear();
  for (int64_t index = entry - run.first; index >= 0;) {
    path.push_back(int32_t(index));
    index = parent_in_run(batch.entries[size_t(run.first + index)], index);
  }
  std::reverse(path.begin(), path.end());
}

void BatchOutputs::prepare(const Batch& batch, int64_t vocab_size) {
  size_t n_logits = 0, n_argmax = 0, n_top = 0;
  index.resize(batch.entries.size());
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    switch (batch.entries[i].output) {
      case Output::None: index[i] = -1; break;
      case Output::Logits: index[i] = int64_t(n_logits++); break;
      case Output::Argmax: index[i] = int64_t(n_argmax++); break;
      case Output::Top: index[i] = int64_t(n_top++); break;
    }
  }
  if (n_top > 0 && (batch.top_k <= 0 || batch.top_k >= vocab_size)) {
    fail("the top {} logits of a vocabulary of {}: keep 1 to one less", batch.top_k, vocab_size);
  }
  logits.resize(n_logits * size_t(vocab_size));
  argmax.resize(n_argmax);
  top.resize(n_top);
}

}  // namespace nt
