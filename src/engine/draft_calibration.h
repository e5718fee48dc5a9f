// How often a drafted candidate whose draft probability is p turns out to be
// what the target keeps next: the draft's probabilities, calibrated online by
// what verification passes kept. A draft's softmax says where it is unsure,
// but not how often the target agrees with it: a draft that is the target
// itself is always right at a probability of 0.5, a poor one often wrong at
// 0.9. Bins of p, apart for a node's likeliest candidate and the others (a
// greedy target keeps the draft's likeliest whenever the two agree), count
// candidates seen and taken; before any evidence a bin answers p itself.
#pragma once

#include <array>
#include <cstddef>

namespace nt {

class DraftCalibration {
 public:
  // The chance that a candidate of draft probability p (`first`: its node's
  // likeliest) is the target's next token.
  double acceptance(double p, bool first) const;
  // Such a candidate was offered where the target chose; `taken`: it chose it.
  void record(double p, bool first, bool taken);

 private:
  static constexpr int kBins = 16;
  static constexpr double kPrior = 4.0;  // pseudo-observations at p itself
  static size_t bin(double p, bool first);
  std::array<double, 2 * kBins> seen_{}, taken_{};
};

}  // namespace nt
