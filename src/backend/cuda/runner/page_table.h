// The paged KV pool's block table on the GPU: row `seq` lists sequence seq's
// pages in position order, as the pool's books (runtime/kv_pages.h) keep
// them, so that kernels find any position's page (kv_layout.h). Rows are
// brought up to date before a pass; only the entries that changed move.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "planning/device_memory_plan.h"  // page_table_bytes
#include "runtime/batch.h"
#include "runtime/kv_pages.h"

namespace nt {

class DevicePageTable {
 public:
  // `sequences` rows of `width` pages: the most a sequence holds
  // (page_table_bytes of device memory).
  DevicePageTable(int64_t sequences, int64_t width);

  const int32_t* table() const { return device_.as<int32_t>(); }  // device
  const int32_t* row(SeqId seq) const { return table() + seq * width_; }
  int64_t width() const { return width_; }

  // Queues on `stream` the copy of seq's entries that differ from what the
  // device holds. The stream must have drained the previous pass's copies
  // of this row (every pass ends synchronized).
  void sync(const KvPages& pages, SeqId seq, cudaStream_t stream);

 private:
  int64_t sequences_, width_;
  DeviceBuffer device_;
  PinnedBuffer staging_;  // what the device holds once the queued copies land
};

}  // namespace nt
