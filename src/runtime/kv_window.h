// Where each layer's KV lives when the model has sliding-window layers: the
// full-attention layers in the pool's books (a context per sequence), the
// sliding-window layers in a pool of their own whose books release what the
// window no longer sees (KvPages with a window), sized for each sequence's
// window and one pass chunk. Shared by the backends and the memory plans.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/arch/model_spec.h"
#include "runtime/kv_pages.h"

namespace nt {

// Positions a window book keeps before each window: how far a sequence may
// step back (a draft model's rejected tokens, a chat turn rendered again).
inline constexpr int64_t kWindowStepBack = 256;

struct KvWindowPlan {
  int64_t window = 0;  // the widest sliding window; 0: every layer's KV is in the full books
  int64_t pages = 0;   // the window pool's pages
  std::vector<bool> windowed;      // per layer: in the window pool
  std::vector<int32_t> index;      // per layer: its place among its pool's layers
  int64_t full_layers = 0, window_layers = 0;

  // The window pool's books, when there is one.
  std::optional<KvPages> books(int64_t page_size, int64_t max_length, int64_t max_sequences) const;
};

// `full_pages`: the full pool's pages; `sequences`: how many sequences hold
// a window at once; `chunk`: the most positions one pass chunk writes to a
// sequence. No window pool when keep_all (--swa-full), when no layer slides,
// or when it would not be smaller than the full pool.
KvWindowPlan plan_kv_window(const ModelSpec& spec, int64_t full_pages, int64_t sequences, int64_t chunk, int64_t page_size,
                            bool keep_all);

}  // namespace nt
