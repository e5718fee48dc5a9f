#include "runtime/kv_window.h"

#include <algorithm>

namespace nt {

std::optional<KvPages> KvWindowPlan::books(int64_t page_size, int64_t max_length, int64_t max_sequences) const {
  if (window == 0) return std::nullopt;
  return KvPages(pages, page_size, max_length, max_sequences, window, kWindowStepBack);
}

KvWindowPlan plan_kv_window(const ModelSpec& spec, int64_t full_pages, int64_t sequences, int64_t chunk, int64_t page_size,
                            bool keep_all) {
  KvWindowPlan plan;
  const size_t n = spec.layers.size();
  plan.windowed.assign(n, false);
  for (const LayerSpec& layer : spec.layers) plan.window = std::max(plan.window, layer.attention.window);
  if (plan.window > 0) {
    plan.pages = std::max<int64_t>(1, sequences) * KvPages::window_pages(plan.window, kWindowStepBack, std::max<int64_t>(1, chunk), page_size);
  }
  if (keep_all || plan.window == 0 || plan.pages >= full_pages) plan.window = plan.pages = 0;
  plan.index.resize(n);
  for (size_t l = 0; l < n; ++l) {
    plan.windowed[l] = plan.window > 0 && spec.layers[l].slides();
    plan.index[l] = int32_t(plan.windowed[l] ? plan.window_layers++ : plan.full_layers++);
  }
  return plan;
}

}  // namespace nt
