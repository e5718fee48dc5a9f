#include "backend/cuda/runner/page_table.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace nt {

DevicePageTable::DevicePageTable(int64_t sequences, int64_t width)
    : sequences_(sequences),
      width_(width),
      device_(page_table_bytes(sequences, width), "the KV block table"),
      staging_(page_table_bytes(sequences, width), "the KV block table") {
  // The device's entries start as page 0, so that no entry ever names a
  // page outside the pool; the staging as no page, so that the first sync
  // of a row copies all of it (page 0 included) rather than trusting the
  // memset, which runs on the legacy stream, unordered with the runner's.
  std::fill_n(staging_.as<int32_t>(), sequences * width, -1);
  NT_CUDA_CHECK(cudaMemset(device_.get(), 0, device_.size()));
  NT_CUDA_CHECK(cudaDeviceSynchronize());
}

void DevicePageTable::sync(const KvPages& pages, SeqId seq, cudaStream_t stream) {
  if (seq < 0 || seq >= sequences_) fail("sequence {} is past the KV block table's {} rows", seq, sequences_);
  const std::span<const int32_t> held = pages.pages(seq);
  if (int64_t(held.size()) > width_) fail("sequence {} holds {} pages, more than the block table's {}", seq, held.size(), width_);
  int32_t* row = staging_.as<int32_t>() + seq * width_;
  // A page a sliding window released reads as page 0: kernels skip the
  // positions before a window, and any read of them stays inside the pool.
  const auto entry = [](int32_t page) { return page == KvPages::kReleased ? 0 : page; };
  size_t first = 0;
  while (first < held.size() && entry(held[first]) == row[first]) ++first;
  if (first == held.size()) return;
  std::transform(held.begin() + ptrdiff_t(first), held.end(), row + first, entry);
  NT_CUDA_CHECK(cudaMemcpyAsync(device_.as<int32_t>() + seq * width_ + first, row + first, (held.size() - first) * 4,
                                cudaMemcpyHostToDevice, stream));
}

}  // namespace nt
