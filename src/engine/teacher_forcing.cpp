#include "engine/teacher_forcing.h"

#include <cmath>

#include "core/error.h"
#include "runtime/model_runner.h"

namespace nt {

ForcedStep score_step(std::span<const float> row, int32_t reference) {
  if (row.size() < 2) fail("teacher forcing needs a vocabulary of at least 2 tokens");
  if (reference < 0 || size_t(reference) >= row.size()) {
    fail("reference token {} is outside the vocabulary ({} tokens)", reference, row.size());
  }
  ForcedStep s;
  s.reference = reference;
  s.top = argmax_first(row);
  float second = -INFINITY;
  for (size_t i = 0; i < row.size(); ++i) {
    if (int32_t(i) != s.top && row[i] > second) second = row[i];
  }
  s.margin = row[size_t(s.top)] - second;
  s.gap = row[size_t(s.top)] - row[size_t(reference)];
  return s;
}

}  // namespace nt
