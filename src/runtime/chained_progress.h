// Load progress over runners that load one after another (a pipeline's
// stages, a tensor split's ranks), reported as one count: each runner's
// bytes count on from where the one before it ended.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace nt {

using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;

class ChainedProgress {
 public:
  explicit ChainedProgress(LoadProgress report) : report_(std::move(report)) {}

  // The callback for the next runner to load; empty when nothing reports.
  LoadProgress next();

 private:
  struct Counts {
    uint64_t before = 0, current = 0;  // the runners done, and the total of the one loading
  };
  LoadProgress report_;
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

}  // namespace nt
