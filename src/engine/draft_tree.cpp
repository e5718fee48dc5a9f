#include "engine/draft_tree.h"

#include "core/error.h"

namespace nt {

int32_t DraftTree::add(int32_t token, int32_t parent) {
  if (parent < -1 || parent >= int32_t(size())) {
    fail("a draft tree of {} nodes cannot grow below node {}: a parent is -1 (the pending token) or an earlier node",
         size(), parent);
  }
  tokens.push_back(token);
  parents.push_back(parent);
  return int32_t(size()) - 1;
}

void DraftTree::assign_chain(std::span<const int32_t> draft) {
  clear();
  for (const int32_t token : draft) add(token, int32_t(size()) - 1);
}

int64_t DraftTree::depth(int32_t node) const {
  int64_t d = 0;
  for (; node >= 0; node = parents[size_t(node)]) ++d;
  return d;
}

int32_t DraftTree::child(int32_t parent, int32_t token) const {
  for (size_t i = 0; i < size(); ++i) {
    if (parents[i] == parent && tokens[i] == token) return int32_t(i);
  }
  return -1;
}

bool DraftTree::is_chain() const {
  for (size_t i = 0; i < size(); ++i) {
    if (parents[i] != int32_t(i) - 1) return false;
  }
  return true;
}

}  // namespace nt
