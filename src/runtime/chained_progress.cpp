#include "runtime/chained_progress.h"

namespace nt {

LoadProgress ChainedProgress::next() {
  counts_->before += counts_->current;
  counts_->current = 0;
  if (!report_) return {};
  return [counts = counts_, report = report_](uint64_t done, uint64_t total) {
    counts->current = total;
    report(counts->before + done, counts->before + total);
  };
}

}  // namespace nt
