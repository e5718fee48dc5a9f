#include "backend/cuda/weights/weight_upload.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "core/error.h"
#include "quant/tensor_type.h"

namespace nt {
namespace {

// Rows of one part read by one request into a slot.
struct Piece {
  const UploadPart* part;
  int64_t first_row, rows;  // within part->target
  FileRange range;
  uint64_t staging_offset;  // in the slot; a multiple of the reader's alignment
};

// Consecutive pieces that share a staging slot.
struct Batch {
  size_t begin = 0, end = 0;  // pieces
  uint64_t staging_bytes = 0, file_bytes = 0;
};

std::vector<Batch> pack(const FileReader& reader, std::span<const UploadPart> parts, uint64_t slot_bytes,
                        std::vector<Piece>& pieces) {
  const uint64_t align = reader.alignment();
  std::vector<Batch> batches(1);
  for (const UploadPart& part : parts) {
    const uint64_t row = row_bytes(part.target.type, part.target.cols);
    if (reader.staging_bytes({part.file_offset, row}) > slot_bytes) {
      fail("{}: a row of {} bytes at offset {} does not fit the {}-byte upload staging slot", reader.path(), row,
           part.file_offset, slot_bytes);
    }
    // An aligned read of n rows stages at most n * row + 2 * align bytes.
    const int64_t per_piece = int64_t(std::max<uint64_t>(1, (slot_bytes - std::min(slot_bytes, 2 * align)) / row));
    for (int64_t r = 0; r < part.rows; r += per_piece) {
      const int64_t n = std::min(per_piece, part.rows - r);
      const FileRange range{part.file_offset + uint64_t(r) * row, uint64_t(n) * row};
      const uint64_t staged = reader.staging_bytes(range);  // whole aligned blocks, so the next piece stays aligned
      if (batches.back().staging_bytes + staged > slot_bytes) batches.push_back({pieces.size(), pieces.size(), 0, 0});
      Batch& b = batches.back();
      pieces.push_back({&part, part.first_row + r, n, range, b.staging_bytes});
      b.end = pieces.size();
      b.staging_bytes += staged;
      b.file_bytes += range.bytes;
    }
  }
  if (batches.back().begin == batches.back().end) batches.pop_back();
  return batches;
}

// The pinned slots, the landing buffer, a stream and one event per slot. The
// destructor waits for every read still writing into a slot and for the
// stream, so that nothing in flight outlives the memory it uses.
class UploadRing {
 public:
  UploadRing(FileReader& reader, const UploadOptions& o, size_t batches) : reader_(reader), tickets_(batches) {
    std::vector<MemoryRegion> regions;
    for (int s = 0; s < o.slots; ++s) {
      slots_.emplace_back(o.slot_bytes, "a pinned weight upload slot");
      regions.push_back({slots_.back().as<void>(), o.slot_bytes});
    }
    landing_ = DeviceBuffer(o.slot_bytes, "the weight upload landing buffer");
    NT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    copied_.resize(slots_.size());
    for (cudaEvent_t& e : copied_) NT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    reader_.register_memory(regions);  // last: nothing after it may throw and leave the reader holding freed slots
  }
  ~UploadRing() {
    for (const std::vector<ReadTicket>& batch : tickets_) wait_ignoring_errors(reader_, batch);
    reader_.register_memory({});
    if (stream_) cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : copied_) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;

  // Starts the reads of batch b into its slot, once the slot's last copy is done.
  void read(size_t b, const Batch& batch, std::span<const Piece> pieces) {
    const size_t s = b % slots_.size();
    NT_CUDA_CHECK(cudaEventSynchronize(copied_[s]));
    uint8_t* dst = slots_[s].as<uint8_t>();
    for (size_t i = batch.begin; i < batch.end; ++i) {
      tickets_[b].push_back(reader_.read_async({pieces[i].range, dst + pieces[i].staging_offset, {}}));
    }
  }

  // Waits for batch b's reads, then queues its copy and its pieces' re-lays.
  void copy(size_t b, const Batch& batch, std::span<const Piece> pieces) {
    const size_t s = b % slots_.size();
    std::vector<ReadTicket>& tickets = tickets_[b];
    for (size_t i = 0; i < tickets.size(); ++i) {
      try {
        reader_.wait(tickets[i]);
      } catch (...) {
        tickets.erase(tickets.begin(), tickets.begin() + long(i) + 1);  // the rest, for the destructor
        throw;
      }
    }
    NT_CUDA_CHECK(cudaMemcpyAsync(landing_.get(), slots_[s].as<void>(), batch.staging_bytes, cudaMemcpyHostToDevice, stream_));
    NT_CUDA_CHECK(cudaEventRecord(copied_[s], stream_));
    const auto* landed = landing_.as<uint8_t>();
    for (size_t i = batch.begin; i < batch.end; ++i) {
      const Piece& p = pieces[i];
      const uint64_t data = p.staging_offset + tickets[i - batch.begin].data_offset;
      relay_matrix_rows_async(p.part->target, p.first_row, p.rows, landed + data, stream_);
    }
    tickets.clear();
  }

  void finish() { NT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  size_t slots() const { return slots_.size(); }

 private:
  FileReader& reader_;
  std::vector<PinnedBuffer> slots_;
  DeviceBuffer landing_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> copied_;
  std::vector<std::vector<ReadTicket>> tickets_;  // per batch, until waited for
};

}  // namespace

uint64_t upload_bytes(std::span<const UploadPart> parts) {
  uint64_t total = 0;
  for (const UploadPart& p : parts) total += uint64_t(p.rows) * row_bytes(p.target.type, p.target.cols);
  return total;
}

void upload_weights(FileReader& reader, std::span<const UploadPart> parts, const UploadOptions& options,
                    const UploadProgress& on_progress) {
  if (options.slots < 2) fail("the weight upload needs at least 2 staging slots, got {}", options.slots);
  std::vector<Piece> pieces;
  const std::vector<Batch> batches = pack(reader, parts, options.slot_bytes, pieces);
  if (batches.empty()) return;
  UploadRing ring(reader, options, batches.size());
  const uint64_t total = upload_bytes(parts);
  uint64_t done = 0;
  size_t next_read = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    // Keep the other slots reading while this one is copied.
    for (; next_read < batches.size() && next_read < b + ring.slots(); ++next_read) ring.read(next_read, batches[next_read], pieces);
    ring.copy(b, batches[b], pieces);
    done += batches[b].file_bytes;
    if (on_progress) on_progress(done, total);
  }
  ring.finish();
}

}  // namespace nt
