#include "storage/layer_reads.h"

#include <algorithm>
#include <map>

#include "core/align.h"
#include "core/error.h"
#include "model/tensor_names.h"

namespace nt {

std::vector<LayerRead> plan_layer_reads(const GgufHeader& header, uint64_t alignment, const std::string& source,
                                        uint64_t max_gap) {
  if (alignment == 0) fail("{}: read alignment must be at least 1", source);
  std::map<int64_t, std::vector<const GgufTensorInfo*>> by_layer;
  for (const auto& t : header.tensors) {
    if (const auto layer = layer_of_tensor(t.name)) by_layer[*layer].push_back(&t);
  }
  std::vector<LayerRead> reads;
  for (const auto& [layer, tensors_of_layer] : by_layer) {
    if (layer != int64_t(reads.size())) fail("{}: no tensors for layer {} (blk.{}.*)", source, reads.size(), reads.size());
    std::vector<const GgufTensorInfo*> tensors = tensors_of_layer;
    std::sort(tensors.begin(), tensors.end(), [](auto* a, auto* b) { return a->offset < b->offset; });

    LayerRead r;
    r.layer = layer;
    std::vector<size_t> run_of_tensor;
    for (const GgufTensorInfo* t : tensors) {
      const uint64_t begin = header.data_offset + t->offset, end = begin + t->n_bytes;
      if (r.runs.empty() || begin > r.runs.back().file.offset + r.runs.back().file.bytes + max_gap) {
        r.runs.push_back({{begin, 0}, 0});
      }
      FileRange& run = r.runs.back().file;
      run.bytes = std::max(run.offset + run.bytes, end) - run.offset;
      run_of_tensor.push_back(r.runs.size() - 1);
      r.tensor_bytes += t->n_bytes;
    }
    for (auto& run : r.runs) {
      run.staging_offset = r.staging_bytes;
      r.staging_bytes += align_up(run.file.offset + run.file.bytes, alignment) - align_down(run.file.offset, alignment);
      r.file_bytes += run.file.bytes;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const LayerRead::Run& run = r.runs[run_of_tensor[i]];
      const uint64_t begin = header.data_offset + tensors[i]->offset;
      r.tensors.push_back({tensors[i], run.staging_offset + run.file.offset % alignment + (begin - run.file.offset)});
    }
    reads.push_back(std::move(r));
  }
  return reads;
}

}  // namespace nt
