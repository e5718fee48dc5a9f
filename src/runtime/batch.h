// A batch: the unit of work of one forward pass. Every entry is one token of
// one sequence at one position, and says what it wants back. A prompt chunk,
// a decode step over 64 sequences, K+1 speculative tokens of one sequence and
// a token tree of drafts are all batches.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/candidates.h"

namespace nt {

using SeqId = int32_t;

// What an entry's forward pass hands back; the backend computes it where the
// logits are, so only what is asked for crosses a bus.
enum class Output : uint8_t {
  None,    // the token only feeds the KV cache (a prompt token before the last)
  Logits,  // the row of vocab_size logits
  Argmax,  // the id of the highest logit (argmax_first)
  Top,     // the Batch::top_k highest logits, highest first, ties lowest id first
};

struct BatchEntry {
  int32_t token = 0;
  int64_t pos = 0;
  SeqId seq = 0;
  Output output = Output::None;
  // Compute this entry's run token by token, with the kernels a one-token
  // decode step takes, instead of as a prompt chunk (whose matrix kernels
  // round differently): a speculative verification run then gives exactly
  // the numbers greedy decoding gives, which the model would otherwise turn
  // into other tokens. Entries of one run agree on it. Both backends honour
  // it in one pass (each weight read once for the run); on CUDA a hybrid
  // split's CPU layers take one-token kernels in the passes the CPU computes
  // them in (all up to cpu_passes.all_up_to entries, a share in wider ones). A
  // stepwise token tree runs stepwise on CUDA where its rows' one-token steps
  // take the short-context decode attention (paths up to kShortDecodeMaxKeys
  // keys, head_dim 64 or 128, sm_90, the tree whole in one chunk, no CPU
  // layers); elsewhere the chunk holding it runs all its rows as a chunk.
  bool stepwise = false;
  // The entry of its run this one follows, by index within the run; -1: the
  // entry just before it (for a run's first, the sequence's cached positions).
  // A run whose entries follow others than the one before them is a token
  // tree (several drafted continuations verified in one pass): entry i of the
  // run is cached at the run's first position plus i, takes its parent's
  // position plus one (its RoPE position: prefix length plus depth), and
  // attends to the sequence's positions before the run and to its own
  // ancestors in the run only.
  int32_t parent = -1;
};

// Entries of one sequence are contiguous and each takes the position after
// its parent's (consecutive positions for a chain); the first of them
// continues the sequence (its position is at most the sequence's length: a
// smaller one overwrites the cache from there on).
struct Batch {
  std::vector<BatchEntry> entries;
  int64_t top_k = 0;  // how many candidates an Output::Top entry gets

  void add(int32_t token, int64_t pos, SeqId seq, Output output = Output::None, bool stepwise = false,
           int32_t parent = -1) {
    entries.push_back({token, pos, seq, output, stepwise, parent});
  }
  // The tokens of one sequence from `pos`, the last one asking for `last_output`.
  void add_run(std::span<const int32_t> tokens, int64_t pos, SeqId seq, Output last_output);
  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }
  void clear() { entries.clear(); }
};

// A contiguous stretch of a batch's entries that belongs to one sequence.
struct SequenceRun {
  SeqId seq = 0;
  int64_t first = 0;  // index of its first entry
  int64_t count = 0;
  int64_t pos = 0;    // position of its first entry; entry i is cached at pos + i
  bool stepwise = false;  // its entries' BatchEntry::stepwise
  bool tree = false;      // a token tree: some entry's parent is not the entry before it
};

// Splits the batch into its sequence runs, checking the batch's rules (and
// naming the entry that breaks one): non-negative positions, each entry's
// parent an earlier entry of its run and its position the parent's plus one,
// each sequence in one run only, one stepwise flag per run.
std::vector<SequenceRun> sequence_runs(const Batch& batch);

// The index within its run of the entry that the run's entry `index` follows
// (BatchEntry::parent resolved): -1 for the run's first.
inline int32_t parent_in_run(const BatchEntry& entry, int64_t index) {
  return entry.parent == -1 ? int32_t(index) - 1 : entry.parent;
}

// Entry `entry` of a tree run (a batch index) and its ancestors, as indices
// within the run, root first: the run's entries it attends to.
void tree_path(const Batch& batch, const SequenceRun& run, int64_t entry, std::vector<int32_t>& path);

// What a pass hands back, one slot per entry that asked (in entry order
// within each kind): `logits` holds a vocab_size row per Output::Logits
// entry, `argmax` an id per Output::Argmax entry, `top` a top_k list per
// Output::Top entry. `index[i]` is entry i's slot in its kind's list (-1 for
// Output::None).
struct BatchOutputs {
  std::vector<float> logits;
  std::vector<int32_t> argmax;
  std::vector<std::vector<Candidate>> top;
  std::vector<int64_t> index;

  // Sizes the lists for `batch` and fills index.
  void prepare(const Batch& batch, int64_t vocab_size);
  std::span<const float> logits_of(size_t entry, int64_t vocab_size) const {
    return {logits.data() + size_t(index[entry]) * size_t(vocab_size), size_t(vocab_size)};
  }
};

}  // namespace nt
