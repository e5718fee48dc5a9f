// A draft of several continuations at once: a tree of drafted tokens below
// the pending token (the context's last, about to be verified), which is its
// root. Nodes come in an order where every parent precedes its children: the
// order one verification pass caches them in, after the pending token. A
// chain (each node below the one before) is the draft of one continuation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace nt {

struct DraftTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;  // per node: its parent node, -1 for the root (the pending token)

  size_t size() const { return tokens.size(); }
  bool empty() const { return tokens.empty(); }
  void clear() {
    tokens.clear();
    parents.clear();
  }
  // Appends a node below `parent` (-1 or an earlier node; nt::Error otherwise) and returns its index.
  int32_t add(int32_t token, int32_t parent);
  // Makes the tree the chain `draft`.
  void assign_chain(std::span<const int32_t> draft);
  // Node i's depth: 1 below the root.
  int64_t depth(int32_t node) const;
  // The child of `parent` (-1: the root) with this token, or -1.
  int32_t child(int32_t parent, int32_t token) const;
  bool is_chain() const;
};

}  // namespace nt
