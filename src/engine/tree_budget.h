// The default size of a speculative token tree, from what a verification
// pass costs on this runner: where the weights stream, a pass of a few
// hundred tokens costs barely more than one of a few, so a tree's extra
// candidates come almost free; where compute bounds the pass (the CPU), every
// token costs and chains are better.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model_runner.h"

namespace nt {

// A tree's pass may cost this much more than a chain's at most.
inline constexpr double kTreeCostRatio = 1.25;

struct PassCost {
  int64_t tokens = 0;
  double ratio = 0;  // its time over the chain pass's
};

struct TreeBudget {
  int64_t tokens = 0;        // tokens per pass for the tree; 0: chains
  int64_t chain_tokens = 0;  // the chain's pass: draft_max + 1
  std::vector<PassCost> measured;
};

// Times stepwise verification passes (every entry asking for its argmax) of
// the chain's draft_max + 1 tokens and of 16, 32, ..., 256 (up to the
// context) on sequence `seq`, which is emptied first and left empty, and
// takes the largest size whose pass costs at most kTreeCostRatio times the
// chain's, stopping at the first that costs more.
TreeBudget measure_tree_budget(ModelRunner& runner, SeqId seq, int64_t draft_max);

// One uncounted verification pass of a chain of draft_max + 1 tokens, and of
// a branching tree when `trees`, on sequence `seq` (emptied first and left
// empty). A backend that loads its kernels when they first run (CUDA's lazy
// module loading) would otherwise pay that inside the first passes of a
// generation; this moves it to load time, as llama.cpp's warm-up decode does.
void warm_up_verification(ModelRunner& runner, SeqId seq, int64_t draft_max, bool trees);

}  // namespace nt
