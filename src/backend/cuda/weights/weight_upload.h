// Moves resident weights from the model file onto the GPU at load: reads
// through a FileReader into a ring of pinned staging slots, asynchronous H2D
// copies into a device landing buffer, and the re-lay into each matrix's
// planes, with the reads of the next slots running while a slot is copied.
// The old path (pageable cudaMemcpy out of the file mapping) ran at the
// pageable copy rate, ~6 GB/s; docs/PERFORMANCE.md has the load times.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <span>

#include "backend/cuda/weights/device_matrix.h"
#include "storage/io_reader.h"

namespace nt {

// Rows [first_row, first_row + rows) of `target`, stored contiguously in the
// file from `file_offset` in the file's block layout.
struct UploadPart {
  DeviceMatrix target;
  int64_t first_row = 0, rows = 0;
  uint64_t file_offset = 0;
};

struct UploadOptions {
  uint64_t slot_bytes = 64ull << 20;  // one pinned staging slot, and the device landing buffer
  int slots = 4;                      // pinned staging slots: reads run up to slots - 1 ahead of the copies
};

// Called after each slot's bytes are queued for the GPU: (bytes of `parts`
// moved so far, their total).
using UploadProgress = std::function<void(uint64_t done, uint64_t total)>;

// File bytes `parts` cover.
uint64_t upload_bytes(std::span<const UploadPart> parts);

// Uploads every part and synchronizes. Throws nt::Error naming the file for a
// failed read, and for a row longer than a staging slot.
void upload_weights(FileReader& reader, std::span<const UploadPart> parts, const UploadOptions& options,
                    const UploadProgress& on_progress);

}  // namespace nt
