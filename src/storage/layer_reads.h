// Where each layer's tensors lie in a GGUF file, and where they land in a
// staging buffer when the layer is read with a FileReader of a given
// alignment. The streaming side computes nothing itself: it issues
// read_async({run.file, staging + run.staging_offset}) for each run and finds
// tensor t at staging + tensors[t].staging_offset once the reads complete.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/gguf_file.h"
#include "storage/io_reader.h"

namespace nt {

struct LayerRead {
  struct Run {
    FileRange file;           // absolute file offsets
    uint64_t staging_offset;  // a multiple of the alignment
  };
  struct Tensor {
    const GgufTensorInfo* info;
    uint64_t staging_offset;  // where its first byte lands
  };
  int64_t layer = 0;
  std::vector<Run> runs;        // usually one: a layer's tensors are adjacent in the file
  std::vector<Tensor> tensors;  // in file order
  uint64_t tensor_bytes = 0;    // the tensors themselves
  uint64_t file_bytes = 0;      // read from the file per use (runs, small gaps included)
  uint64_t staging_bytes = 0;   // staging buffer the layer needs
};

// One entry per layer 0..N-1 of the "blk.N." tensors in `header`. Tensors of a
// layer closer than `max_gap` bytes share a run (one request beats skipping a
// few bytes). Throws nt::Error naming `source` if a layer index has no tensors.
// `alignment` is FileReader::alignment() of the reader that will be used.
std::vector<LayerRead> plan_layer_reads(const GgufHeader& header, uint64_t alignment, const std::string& source,
                                        uint64_t max_gap = 1ull << 20);

}  // namespace nt
