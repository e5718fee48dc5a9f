// LayerStreamer: runs layers that do not fit in VRAM by moving their weights
// onto the GPU for every pass, from pinned host RAM (read once at load) or
// from storage (read per use into a ring of pinned staging slots).
//
// A pass transfers the streamed layers its schedule runs on the GPU (all of
// them, a layer-skip subset, or those a hybrid pass leaves to the host), in
// its order. Per transfer j of the pass, on a copy stream of its own:
//   1. H2D copy of the layer's file-layout bytes into one raw device buffer
//   2. wait "slot free": the compute of the layer that last used GPU slot j % K
//   3. re-lay each matrix into its planar DeviceMatrix memory in slot j % K
//   4. record "slot copied"; the compute stream waits on it before the layer.
// A disk layer's staging slot is overwritten by the next read only after the
// H2D copy that read it finished (the reader's before_write hook waits on that
// copy's event). Transfers of the first K streamed layers are issued when a
// chunk begins, before the resident layers compute, and transfer j + K is
// issued once layer j's compute is queued, so copies overlap all compute.
// Storage reads run ahead cyclically across chunks in the order of the last
// pass that read any, so they also overlap the resident layers; a pass that
// reads the disk layers in another order waits out the reads in flight and
// starts over in its own.
// With run_ahead, transfer j + K of a pass of P transfers, j + K >= P, is
// transfer j + K - P of the next pass, assumed to repeat this one: a RAM-tier
// layer's copy is issued into the slot layer j frees, and the next pass
// keeps it if its layers begin the same way. Slots go round the transfers of
// all passes (transfer t in slot t % K), so a transfer always waits for the
// compute that last used its slot.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/trace_log.h"
#include "backend/cuda/weights/device_matrix.h"
#include "planning/placement.h"
#include "storage/io_reader.h"
#include "storage/layer_reads.h"

namespace nt {

// Device landing buffers for streamed layers' H2D copies (see LayerStreamer).
constexpr int kLandingBuffers = 2;

// A matrix of a streamed layer: its planar memory placed in GPU slot 0 (slot
// s is slot_bytes x s further on) and the file-layout row ranges (stacked
// row-wise, e.g. Q, K, V) it is built from.
struct StreamedMatrix {
  struct Part {
    uint64_t staging_offset;  // of the rows' first byte in the layer's staging layout
    int64_t first_row, rows;
  };
  DeviceMatrix target;
  std::vector<Part> parts;
};

struct StreamedLayer {
  int64_t layer = 0;
  Tier tier = Tier::Ram;  // Ram or Disk
  LayerRead read;
  std::vector<StreamedMatrix> matrices;
  // A RAM-tier layer whose pinned bytes are not the file's (a tensor-split
  // rank's cuts of it): `fill` writes them, read.staging_bytes with the
  // matrices' parts inside, once while the streamer is constructed. Empty:
  // the layer is read from the file.
  std::function<void(uint8_t*)> fill;
};

struct LayerStreamOptions {
  int device = 0;
  int gpu_slots = 2;
  uint64_t slot_bytes = 0;  // from one GPU slot to the next
  int staging_slots = 2;
  bool run_ahead = false;  // copy the next pass's first RAM-tier layers while this one ends (above)
  std::string trace_path;  // Chrome-trace JSON written when the streamer is destroyed; empty: none
  // Reads the RAM-tier layers at load instead of the storage reader (which
  // may bypass a page cache that already holds the file); its alignment must
  // divide the storage reader's. Used only by the constructor.
  FileReader* load_reader = nullptr;
  std::function<void(uint64_t done, uint64_t total)> on_load_progress;  // file bytes of RAM-tier layers read
};

// Totals since load, for the benchmarks.
struct StreamStats {
  uint64_t chunks = 0;
  uint64_t h2d_bytes = 0;
  double h2d_seconds = 0;  // sum of the H2D copies' device times (copy stream busy copying)
  uint64_t disk_bytes = 0;
  double wall_seconds = 0;  // sum of chunk wall times
};

class LayerStreamer {
 public:
  // Reads the RAM-tier layers into pinned memory now and starts the first
  // storage reads. `layers` are the streamed layers in forward order.
  LayerStreamer(std::unique_ptr<FileReader> reader, std::vector<StreamedLayer> layers, const LayerStreamOptions& options);
  ~LayerStreamer();
  LayerStreamer(const LayerStreamer&) = delete;
  LayerStreamer& operator=(const LayerStreamer&) = delete;

  bool streams(int64_t layer) const { return layer >= 0 && size_t(layer) < index_of_layer_.size() && index_of_layer_[size_t(layer)] >= 0; }
  // The RAM tier's pinned copy of a streamed layer (the staging layout of its
  // LayerRead); null for a disk layer.
  const uint8_t* pinned_bytes(int64_t layer) const;
  // Call once per pass, before the first layer's work is queued on
  // `compute`: the pass transfers the streamed ones of `layers`, in order.
  void begin_chunk(cudaStream_t compute, std::span<const int32_t> layers);
  // Compute waits for the layer's weights; returns the GPU slot they are in.
  int before_layer(int64_t layer, cudaStream_t compute);
  void after_layer(int64_t layer, cudaStream_t compute);  // its slot is free once compute gets here
  // A span of host work (a hybrid pass's CPU layers) for the trace.
  void host_span(const std::string& name, std::chrono::steady_clock::time_point begin,
                 std::chrono::steady_clock::time_point end);
  // After the compute stream was synchronized: collects timings.
  void end_chunk();

  const StreamStats& stats() const { return stats_; }
  std::string summary() const;
  const FileReader& reader() const { return *reader_; }

 private:
  struct PendingRead {
    size_t disk_index;
    int slot;
    std::vector<ReadTicket> tickets;
  };
  using Clock = std::chrono::steady_clock;

  // Issues the pass_index-th transfer of the pass (pass_index >= pass_.size():
  // of the next one, which repeats this pass's layers).
  void transfer(size_t pass_index);
  int slot_of(size_t pass_index) const { return int((pass_base_ + pass_index) % uint64_t(options_.gpu_slots)); }
  // Makes the storage reads follow `order` (disk indices) from now on.
  void restart_reads(std::vector<size_t> order);
  void queue_read(size_t disk_index, int slot);

  std::unique_ptr<FileReader> reader_;
  std::vector<StreamedLayer> layers_;
  LayerStreamOptions options_;
  std::vector<int> index_of_layer_;   // layer -> streamed index, -1 when resident
  std::vector<size_t> disk_index_;    // streamed index -> index among disk layers
  std::vector<size_t> disk_layers_;   // disk index -> streamed index
  std::vector<PinnedBuffer> pinned_;  // per streamed index; empty for disk layers

  // H2D copies run on copy_, re-layouts on relay_; two landing buffers let the
  // copy of one layer overlap the re-layout of the previous one.
  cudaStream_t copy_ = nullptr, relay_ = nullptr;
  DeviceBuffer raw_[kLandingBuffers];        // file-layout landing buffers of the H2D copies
  std::vector<cudaEvent_t> landing_free_;    // per landing buffer: its last re-layout finished
  uint64_t transfers_ = 0;                   // issued so far: picks the landing buffer
  std::vector<cudaEvent_t> slot_copied_, slot_free_;
  // Pinned staging ring for storage reads.
  std::vector<PinnedBuffer> staging_;
  std::vector<cudaEvent_t> staging_copied_;
  std::unique_ptr<std::atomic<bool>[]> staging_used_;
  std::unique_ptr<std::atomic<int64_t>[]> read_begin_ns_;
  std::deque<PendingRead> reads_;
  std::vector<size_t> read_order_;  // disk indices, in the order the reads cycle through
  size_t next_read_ = 0;            // index into read_order_ of the next queued read
  // This pass: the streamed indices it transfers, and each one's place (-1: none).
  std::vector<size_t> pass_;
  std::vector<int> pass_place_;
  uint64_t pass_base_ = 0;     // transfers of all passes before this pass's first
  std::vector<size_t> ahead_;  // streamed indices the last pass transferred for the next one, in order
  uint64_t ahead_for_ = 0;     // the chunk (stats_.chunks) they were issued for

  // Timing: per streamed index, events of this chunk. A transfer's run on
  // the copy and re-lay streams: two sets, by the parity of the pass it is
  // for, since transfers ahead run while this pass's are read.
  struct CopyEvents {
    std::vector<cudaEvent_t> begin, h2d_end, end;
  };
  CopyEvents copies_[2];
  CopyEvents& copies_for(uint64_t chunk) { return copies_[chunk % 2]; }
  std::vector<cudaEvent_t> compute_begin_, compute_end_;
  std::vector<double> read_begin_us_, read_end_us_;
  cudaEvent_t resident_begin_ = nullptr;
  Clock::time_point chunk_start_;
  StreamStats stats_;
  TraceLog trace_;
};

}  // namespace nt
