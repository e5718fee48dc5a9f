#include "engine/draft_calibration.h"

#include <algorithm>

namespace nt {

size_t DraftCalibration::bin(double p, bool first) {
  return size_t(std::clamp(int(p * kBins), 0, kBins - 1) + (first ? 0 : kBins));
}

double DraftCalibration::acceptance(double p, bool first) const {
  const size_t b = bin(p, first);
  return (taken_[b] + kPrior * p) / (seen_[b] + kPrior);
}

void DraftCalibration::record(double p, bool first, bool taken) {
  const size_t b = bin(p, first);
  seen_[b] += 1.0;
  taken_[b] += taken ? 1.0 : 0.0;
}

}  // namespace nt
