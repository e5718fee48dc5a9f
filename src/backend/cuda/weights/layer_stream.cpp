#include "backend/cuda/weights/layer_stream.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/byte_size.h"

namespace nt {
namespace {

enum TraceThread { kReads = 1, kCopies = 2, kRelays = 3, kCompute = 4, kHost = 5 };

cudaEvent_t make_event(bool timed) {
  cudaEvent_t e = nullptr;
  NT_CUDA_CHECK(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

std::vector<cudaEvent_t> make_events(size_t n, bool timed) {
  std::vector<cudaEvent_t> v(n);
  for (auto& e : v) e = make_event(timed);
  return v;
}

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  NT_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

}  // namespace

LayerStreamer::LayerStreamer(std::unique_ptr<FileReader> reader, std::vector<StreamedLayer> layers,
                             const LayerStreamOptions& options)
    : reader_(std::move(reader)),
      layers_(std::move(layers)),
      options_(options),
      trace_(options.trace_path, {"storage reads (host)", "H2D copies", "re-lay kernels", "GPU compute", "CPU layers (host)"}) {
  if (options_.gpu_slots < 2 || options_.staging_slots < 2) {
    fail("layer streaming needs at least 2 GPU slots and 2 staging slots (got {} and {})", options_.gpu_slots,
         options_.staging_slots);
  }
  const size_t n = layers_.size();
  int64_t max_layer = -1;
  uint64_t raw_bytes = 0, disk_slot_bytes = 0;
  for (const StreamedLayer& l : layers_) {
    max_layer = std::max(max_layer, l.layer);
    raw_bytes = std::max(raw_bytes, l.read.staging_bytes);
    if (l.tier == Tier::Disk) disk_slot_bytes = std::max(disk_slot_bytes, l.read.staging_bytes);
  }
  index_of_layer_.assign(size_t(max_layer + 1), -1);
  disk_index_.assign(n, 0);
  pass_place_.assign(n, -1);
  pinned_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    index_of_layer_[size_t(layers_[i].layer)] = int(i);
    if (layers_[i].tier == Tier::Disk) {
      disk_index_[i] = disk_layers_.size();
      disk_layers_.push_back(i);
    }
  }

  // Re-lays at the lowest priority: the compute stream's kernels take the SMs
  // first (a 0.2 ms GPU layer took 3-4.5 ms beside a 70B layer's re-lay).
  int least = 0, greatest = 0;
  NT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  NT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  NT_CUDA_CHECK(cudaStreamCreateWithPriority(&relay_, cudaStreamNonBlocking, least));
  for (DeviceBuffer& raw : raw_) {
    if (raw_bytes) raw = DeviceBuffer(raw_bytes, "a streamed-layer H2D landing buffer");
  }
  landing_free_ = make_events(kLandingBuffers, false);
  slot_copied_ = make_events(size_t(options_.gpu_slots), false);
  slot_free_ = make_events(size_t(options_.gpu_slots), false);
  for (CopyEvents& c : copies_) {
    for (auto* v : {&c.begin, &c.h2d_end, &c.end}) *v = make_events(n, true);
  }
  for (auto* v : {&compute_begin_, &compute_end_}) *v = make_events(n, true);
  read_begin_us_.assign(n, -1);
  read_end_us_.assign(n, -1);
  resident_begin_ = make_event(true);

  // RAM tier: the file bytes of each layer, read once into pinned memory in
  // the staging layout (the file layout, aligned for the storage reader). A
  // load reader of finer alignment lands each run where that layout puts it.
  FileReader& load = options_.load_reader ? *options_.load_reader : *reader_;
  const uint64_t align = reader_->alignment(), load_align = load.alignment();
  if (align % load_align != 0) {
    fail("{}: the load reader's alignment {} does not divide the storage reader's {}", reader_->path(), load_align, align);
  }
  std::vector<ReadTicket> tickets;
  std::vector<std::pair<size_t, size_t>> layer_ends;  // (RAM-tier layer, end of its tickets)
  uint64_t ram_bytes = 0, loaded = 0;
  for (size_t i = 0; i < n; ++i) ram_bytes += layers_[i].tier == Tier::Ram ? layers_[i].read.file_bytes : 0;
  size_t waited = 0;  // tickets, in order
  try {
    for (size_t i = 0; i < n; ++i) {  // pinning layer i + 1 overlaps the reads of layer i
      if (layers_[i].tier != Tier::Ram) continue;
      pinned_[i] = PinnedBuffer(layers_[i].read.staging_bytes, "a pinned RAM-tier layer");
      if (layers_[i].fill) {
        layers_[i].fill(pinned_[i].as<uint8_t>());
        layers_[i].fill = nullptr;  // what it refers to need not outlive the load
        loaded += layers_[i].read.file_bytes;
        if (options_.on_load_progress) options_.on_load_progress(loaded, ram_bytes);
        continue;
      }
      for (const LayerRead::Run& run : layers_[i].read.runs) {
        const uint64_t shift = run.file.offset % align - run.file.offset % load_align;
        tickets.push_back(load.read_async({run.file, pinned_[i].as<uint8_t>() + run.staging_offset + shift, {}}));
      }
      layer_ends.emplace_back(i, tickets.size());
    }
    for (const auto& [i, end] : layer_ends) {
      while (waited < end) load.wait(tickets[waited++]);
      loaded += layers_[i].read.file_bytes;
      if (options_.on_load_progress) options_.on_load_progress(loaded, ram_bytes);
    }
  } catch (...) {  // no read may still be writing into pinned memory this unwinding frees
    wait_ignoring_errors(load, std::span(tickets).subspan(waited));
    throw;
  }

  // Storage tier: a ring of pinned staging slots, the first reads in flight.
  if (!disk_layers_.empty()) {
    std::vector<MemoryRegion> regions;
    for (int s = 0; s < options_.staging_slots; ++s) {
      staging_.emplace_back(disk_slot_bytes, "a pinned storage staging slot");
      regions.push_back({staging_.back().as<void>(), disk_slot_bytes});
    }
    reader_->register_memory(regions);
    staging_copied_ = make_events(size_t(options_.staging_slots), false);
    staging_used_ = std::make_unique<std::atomic<bool>[]>(size_t(options_.staging_slots));
    read_begin_ns_ = std::make_unique<std::atomic<int64_t>[]>(size_t(options_.staging_slots));
    for (int s = 0; s < options_.staging_slots; ++s) staging_used_[size_t(s)] = false;
    trace_.start_host_clock();  // reads issued at load show before the first chunk's origin
    std::vector<size_t> order(disk_layers_.size());
    for (size_t d = 0; d < order.size(); ++d) order[d] = d;
    restart_reads(std::move(order));
  }
}

void LayerStreamer::restart_reads(std::vector<size_t> order) {
  for (const PendingRead& r : reads_) {
    for (const ReadTicket& t : r.tickets) reader_->wait(t);
  }
  reads_.clear();
  read_order_ = std::move(order);
  next_read_ = 0;
  for (int s = 0; s < options_.staging_slots; ++s) {
    queue_read(read_order_[next_read_], s);
    next_read_ = (next_read_ + 1) % read_order_.size();
  }
}

const uint8_t* LayerStreamer::pinned_bytes(int64_t layer) const {
  if (!streams(layer)) fail("layer {} is not streamed, so it has no pinned copy", layer);
  const PinnedBuffer& pinned = pinned_[size_t(index_of_layer_[size_t(layer)])];
  return pinned.size() ? pinned.as<uint8_t>() : nullptr;
}

LayerStreamer::~LayerStreamer() {
  for (const PendingRead& r : reads_) wait_ignoring_errors(*reader_, r.tickets);  // nothing reads these slots any more
  if (copy_) cudaStreamSynchronize(copy_);
  if (relay_) cudaStreamSynchronize(relay_);
  for (auto* v : {&slot_copied_, &slot_free_, &landing_free_, &staging_copied_, &copies_[0].begin, &copies_[0].h2d_end,
                  &copies_[0].end, &copies_[1].begin, &copies_[1].h2d_end, &copies_[1].end, &compute_begin_, &compute_end_}) {
    for (cudaEvent_t e : *v) cudaEventDestroy(e);
  }
  if (resident_begin_) cudaEventDestroy(resident_begin_);
  if (copy_) cudaStreamDestroy(copy_);
  if (relay_) cudaStreamDestroy(relay_);
}

void LayerStreamer::queue_read(size_t disk_index, int slot) {
  const StreamedLayer& l = layers_[disk_layers_[disk_index]];
  PendingRead pending{disk_index, slot, {}};
  // Runs on the reader's thread before any byte lands in the slot: the H2D
  // copy that last read this slot must have finished.
  auto before_write = [this, slot] {
    if (staging_used_[size_t(slot)]) {
      NT_CUDA_CHECK(cudaSetDevice(options_.device));
      NT_CUDA_CHECK(cudaEventSynchronize(staging_copied_[size_t(slot)]));
    }
    int64_t expected = 0;
    read_begin_ns_[size_t(slot)].compare_exchange_strong(
        expected, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
  };
  read_begin_ns_[size_t(slot)] = 0;
  for (const LayerRead::Run& run : l.read.runs) {
    pending.tickets.push_back(reader_->read_async({run.file, staging_[size_t(slot)].as<uint8_t>() + run.staging_offset, before_write}));
  }
  reads_.push_back(std::move(pending));
}

void LayerStreamer::transfer(size_t pass_index) {
  const bool next_pass = pass_index >= pass_.size();
  const size_t index = pass_[next_pass ? pass_index - pass_.size() : pass_index];
  const StreamedLayer& l = layers_[index];
  const int slot = slot_of(pass_index);
  CopyEvents& events = copies_for(stats_.chunks + (next_pass ? 1 : 0));
  const uint8_t* host = nullptr;
  int staging_slot = -1;
  if (l.tier == Tier::Ram) {
    host = pinned_[index].as<uint8_t>();
  } else {
    if (reads_.empty() || reads_.front().disk_index != disk_index_[index]) {
      fail("layer streaming out of order: layer {} was needed but the next storage read is for another layer "
           "(an earlier forward pass was interrupted)",
           l.layer);
    }
    PendingRead r = std::move(reads_.front());
    reads_.pop_front();
    for (const ReadTicket& t : r.tickets) reader_->wait(t);
    staging_slot = r.slot;
    const int64_t begin_ns = read_begin_ns_[size_t(staging_slot)];
    const auto begin = Clock::time_point(std::chrono::nanoseconds(begin_ns));
    read_begin_us_[index] = trace_.host_us(begin);
    read_end_us_[index] = trace_.host_us(Clock::now());
    stats_.disk_bytes += l.read.file_bytes;
    host = staging_[size_t(staging_slot)].as<uint8_t>();
  }
  const size_t landing = size_t(transfers_++ % kLandingBuffers);
  NT_CUDA_CHECK(cudaStreamWaitEvent(copy_, landing_free_[landing], 0));
  NT_CUDA_CHECK(cudaEventRecord(events.begin[index], copy_));
  NT_CUDA_CHECK(cudaMemcpyAsync(raw_[landing].get(), host, l.read.staging_bytes, cudaMemcpyHostToDevice, copy_));
  NT_CUDA_CHECK(cudaEventRecord(events.h2d_end[index], copy_));
  if (staging_slot >= 0) {
    NT_CUDA_CHECK(cudaEventRecord(staging_copied_[size_t(staging_slot)], copy_));
    staging_used_[size_t(staging_slot)] = true;
    queue_read(read_order_[next_read_], staging_slot);
    next_read_ = (next_read_ + 1) % read_order_.size();
  }
  // Re-layout into the GPU slot once the bytes have landed and the slot's last reader is done.
  NT_CUDA_CHECK(cudaStreamWaitEvent(relay_, events.h2d_end[index], 0));
  NT_CUDA_CHECK(cudaStreamWaitEvent(relay_, slot_free_[size_t(slot)], 0));
  const auto* raw = raw_[landing].as<uint8_t>();
  const uint64_t slot_offset = uint64_t(slot) * options_.slot_bytes;
  for (const StreamedMatrix& m : l.matrices) {
    const DeviceMatrix target = offset_device_matrix(m.target, slot_offset);
    for (const StreamedMatrix::Part& p : m.parts) relay_matrix_rows_async(target, p.first_row, p.rows, raw + p.staging_offset, relay_);
  }
  NT_CUDA_CHECK(cudaEventRecord(landing_free_[landing], relay_));
  NT_CUDA_CHECK(cudaEventRecord(events.end[index], relay_));
  NT_CUDA_CHECK(cudaEventRecord(slot_copied_[size_t(slot)], relay_));
  stats_.h2d_bytes += l.read.staging_bytes;
}

void LayerStreamer::begin_chunk(cudaStream_t compute, std::span<const int32_t> layers) {
  if (stats_.chunks == 0) trace_.start(compute);
  chunk_start_ = Clock::now();
  std::fill(read_begin_us_.begin(), read_begin_us_.end(), -1.0);
  for (const size_t index : pass_) pass_place_[index] = -1;
  pass_.clear();
  std::vector<size_t> disk_order;
  for (const int32_t layer : layers) {
    if (!streams(layer)) continue;
    const size_t index = size_t(index_of_layer_[size_t(layer)]);
    if (pass_place_[index] >= 0) fail("a layer schedule runs layer {} twice", layer);
    pass_place_[index] = int(pass_.size());
    pass_.push_back(index);
    if (layers_[index].tier == Tier::Disk) disk_order.push_back(disk_index_[index]);
  }
  if (!disk_order.empty() && disk_order != read_order_) restart_reads(std::move(disk_order));
  // Transfers the last pass issued ahead count as this pass's first when its
  // layers begin with them; otherwise they are spent and this pass follows them.
  // (A pass that threw before end_chunk leaves copies issued for a chunk that never came: spent.)
  const bool kept = !ahead_.empty() && ahead_for_ == stats_.chunks && ahead_.size() <= pass_.size() &&
                    std::equal(ahead_.begin(), ahead_.end(), pass_.begin());
  pass_base_ = transfers_ - (kept ? ahead_.size() : 0);
  for (size_t j = kept ? ahead_.size() : 0; j < pass_.size() && j < size_t(options_.gpu_slots); ++j) transfer(j);
  ahead_.clear();
  NT_CUDA_CHECK(cudaEventRecord(resident_begin_, compute));
}

int LayerStreamer::before_layer(int64_t layer, cudaStream_t compute) {
  const size_t index = size_t(index_of_layer_[size_t(layer)]);
  if (pass_place_[index] < 0) fail("layer {} runs on the GPU but its pass did not transfer it", layer);
  const int slot = slot_of(size_t(pass_place_[index]));
  NT_CUDA_CHECK(cudaStreamWaitEvent(compute, slot_copied_[size_t(slot)], 0));
  NT_CUDA_CHECK(cudaEventRecord(compute_begin_[index], compute));
  return slot;
}

void LayerStreamer::after_layer(int64_t layer, cudaStream_t compute) {
  const size_t index = size_t(index_of_layer_[size_t(layer)]);
  const size_t place = size_t(pass_place_[index]);
  NT_CUDA_CHECK(cudaEventRecord(compute_end_[index], compute));
  NT_CUDA_CHECK(cudaEventRecord(slot_free_[size_t(slot_of(place))], compute));
  const size_t next = place + size_t(options_.gpu_slots);
  if (next < pass_.size()) {
    transfer(next);
  } else if (options_.run_ahead && next - pass_.size() == ahead_.size() && next - pass_.size() < pass_.size() &&
             layers_[pass_[next - pass_.size()]].tier == Tier::Ram) {
    ahead_.push_back(pass_[next - pass_.size()]);
    ahead_for_ = stats_.chunks + 1;
    transfer(next);
  }
}

void LayerStreamer::host_span(const std::string& name, Clock::time_point begin, Clock::time_point end) {
  trace_.span(name, kHost, trace_.host_us(begin), trace_.host_us(end));
}

void LayerStreamer::end_chunk() {
  ++stats_.chunks;
  stats_.wall_seconds += std::chrono::duration<double>(Clock::now() - chunk_start_).count();
  const uint64_t step = stats_.chunks;
  auto at = [&](cudaEvent_t e) { return trace_.device_us(e); };
  if (trace_.on()) {
    trace_.span(fmt::format("step {}: embedding + resident layers", step), kCompute, at(resident_begin_),
              pass_.empty() ? at(resident_begin_) : at(compute_begin_[pass_[0]]));
  }
  const CopyEvents& copies = copies_for(stats_.chunks - 1);  // this pass's (counted above)
  for (const size_t i : pass_) {
    stats_.h2d_seconds += elapsed_ms(copies.begin[i], copies.h2d_end[i]) * 1e-3;
    if (!trace_.on()) continue;
    const std::string name = fmt::format("layer {} ({})", layers_[i].layer, tier_name(layers_[i].tier));
    if (read_begin_us_[i] >= 0) trace_.span("read " + name, kReads, read_begin_us_[i], read_end_us_[i]);
    trace_.span("H2D " + name, kCopies, at(copies.begin[i]), at(copies.h2d_end[i]));
    trace_.span("re-lay " + name, kRelays, at(copies.h2d_end[i]), at(copies.end[i]));
    trace_.span("compute " + name, kCompute, at(compute_begin_[i]), at(compute_end_[i]));
  }
}

std::string LayerStreamer::summary() const {
  const double chunks = double(std::max<uint64_t>(stats_.chunks, 1));
  std::string s = fmt::format("streaming: {} passes, {} H2D per pass at {:.2f} GB/s while copying", stats_.chunks,
                              format_size(uint64_t(double(stats_.h2d_bytes) / chunks)),
                              stats_.h2d_seconds > 0 ? double(stats_.h2d_bytes) / stats_.h2d_seconds / 1e9 : 0.0);
  if (stats_.disk_bytes) {
    s += fmt::format(", storage {} per pass at {:.2f} GB/s over the passes' wall time ({})",
                     format_size(uint64_t(double(stats_.disk_bytes) / chunks)),
                     stats_.wall_seconds > 0 ? double(stats_.disk_bytes) / stats_.wall_seconds / 1e9 : 0.0,
                     reader_->description());
  }
  return s;
}

}  // namespace nt
