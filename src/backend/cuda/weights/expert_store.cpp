#include "backend/cuda/weights/expert_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "runtime/device_layout.h"
#include "storage/host_memory.h"

namespace nt {
namespace {

double gib(uint64_t bytes) { return double(bytes) / double(1ull << 30); }

// The CUDA planes of a file-format matrix, written on the host: the
// re-lay kernel's copy (device_matrix.h), so that the image goes over as it lies.
void lay_out_matrix(const WeightRef& w, const DeviceMatrix& image) {
  const WeightLayout& l = weight_layout(w.type);
  if (l.n_segments == 0) {
    std::memcpy(image.plane[0], w.data, size_t(w.rows) * w.row_stride());
    return;
  }
  const int64_t blocks = w.rows * (w.cols / l.block_elems);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = w.data + b * l.block_bytes;
    for (int s = 0; s < l.n_segments; ++s) {
      const WeightLayout::Segment& seg = l.segments[s];
      std::memcpy(image.plane[seg.plane] + b * l.plane_bytes[seg.plane] + seg.dst, block + seg.src, size_t(seg.len));
    }
  }
}

}  // namespace

ExpertMatrices place_expert(const ExpertLayout& t, uint8_t* base) {
  return {place_device_matrix(t.gate, t.width, t.dim, base), place_device_matrix(t.up, t.width, t.dim, base + t.up_at),
          place_device_matrix(t.down, t.dim, t.width, base + t.down_at)};
}

ExpertStore::ExpertStore(const ModelSpec& spec, const ModelWeights& weights, const ExpertPlan& plan,
                         std::span<const uint64_t> counts, const std::function<void(uint64_t, uint64_t)>& on_progress)
    : n_experts_(spec.layers.at(0).moe.n_experts), resident_(plan.all_resident()), slot_bytes_(plan.slot_bytes) {
  for (int64_t l = 0; l < spec.n_layers; ++l) layouts_.push_back(expert_layout(spec, weights.layers[size_t(l)], l));
  const int64_t total = plan.experts, slots = plan.slots;
  const uint64_t host_bytes = plan.pinned_bytes();
  if (host_bytes > 0 && host_bytes > host_mem_available()) {
    fail("the {} experts beyond the {} that VRAM caches need {:.2f} GiB of pinned RAM, but {:.2f} GiB is available",
         total - slots, slots, gib(host_bytes), gib(host_mem_available()));
  }
  slots_ = DeviceBuffer(size_t(slots) * slot_bytes_, "the experts in VRAM");
  slot_.resize(size_t(slots));
  held_.assign(size_t(slots), 0);
  home_.assign(size_t(total), -1);
  uses_.assign(size_t(total), 0);
  for (Slot& s : slot_) {
    NT_CUDA_CHECK(cudaEventCreateWithFlags(&s.landed, cudaEventDisableTiming));
    NT_CUDA_CHECK(cudaEventCreateWithFlags(&s.read, cudaEventDisableTiming));
  }
  NT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));

  // Which expert each slot starts with: all of them in order, or those the
  // counts chose most (else an equal share of every layer's), their counts
  // the cache's first.
  std::vector<int64_t> start(static_cast<size_t>(slots));
  if (resident_) {
    std::iota(start.begin(), start.end(), 0);
  } else {
    start = experts_in_vram(plan, spec.n_layers, counts);
    for (size_t x = 0; x < counts.size(); ++x) uses_[x] = uint32_t(std::min<uint64_t>(counts[x], 1u << 24));
  }
  table_ = DeviceBuffer(size_t(total) * 4, "the experts' slot table");
  host_table_ = PinnedBuffer(size_t(total) * 4, "the experts' slot table");  // fill() keeps it
  std::fill_n(host_table_.as<int32_t>(), total, -1);
  const uint64_t load_total = resident_ ? uint64_t(total) * slot_bytes_ : host_bytes;
  uint64_t loaded = 0;
  if (resident_) {
    // Through a pinned staging of a few experts at a time.
    const int64_t batch = std::max<int64_t>(1, int64_t((256ull << 20) / slot_bytes_));
    PinnedBuffer staging(size_t(std::min(batch, total)) * slot_bytes_, "the experts' upload staging");
    for (int64_t x = 0; x < total; x += batch) {
      const int64_t count = std::min(batch, total - x);
      lay_out_all(weights, x, count, [&](int64_t y) { return staging.as<uint8_t>() + uint64_t(y - x) * slot_bytes_; });
      NT_CUDA_CHECK(cudaMemcpy(slot_base(x), staging.as<uint8_t>(), size_t(count) * slot_bytes_, cudaMemcpyHostToDevice));
      loaded += uint64_t(count) * slot_bytes_;
      if (on_progress) on_progress(loaded, load_total);
    }
  } else {
    // The misses' source in the file's layout, then the slots' first experts through the landing buffer.
    pin_file_experts(weights, host_bytes, [&](uint64_t bytes) {
      loaded += bytes;
      if (on_progress) on_progress(loaded, load_total);
    });
    landing_ = DeviceBuffer(plan.landing_bytes, "the experts' landing buffer");
    const auto start_time = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < slots; ++s) fill(s, start[size_t(s)]);
    NT_CUDA_CHECK(cudaStreamSynchronize(copy_));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
    if (slots > 0 && seconds > 0) link_gbps_ = double(stats_.copied_bytes) / seconds / 1e9;
    stats_.copied_bytes = 0;  // the load's, not a miss's
    if (on_progress) on_progress(load_total, load_total);
  }
  for (int64_t s = 0; s < slots; ++s) {
    slot_[size_t(s)].expert = start[size_t(s)];
    home_[size_t(start[size_t(s)])] = s;
    host_table_.as<int32_t>()[start[size_t(s)]] = int32_t(s);
    by_use_.insert(key(s));
  }
  NT_CUDA_CHECK(cudaMemcpy(table_.get(), host_table_.as<int32_t>(), size_t(total) * 4, cudaMemcpyHostToDevice));
}

ExpertStore::~ExpertStore() {
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  for (Slot& s : slot_) {
    if (s.landed) cudaEventDestroy(s.landed);
    if (s.read) cudaEventDestroy(s.read);
  }
}

void ExpertStore::lay_out(const ModelWeights& weights, int64_t x, uint8_t* image) const {
  using enum LayerRole;
  const LayerWeights& lw = weights.layers[size_t(x / n_experts_)];
  const int64_t e = x % n_experts_;
  const ExpertMatrices m = place_expert(layout_of(x), image);
  lay_out_matrix(lw[FfnGateExperts].expert(e), m.gate);
  lay_out_matrix(lw[FfnUpExperts].expert(e), m.up);
  lay_out_matrix(lw[FfnDownExperts].expert(e), m.down);
}

void ExpertStore::lay_out_all(const ModelWeights& weights, int64_t from, int64_t count,
                              const std::function<uint8_t*(int64_t)>& images) const {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < std::min(threads, count); ++t) {
    pool.emplace_back([&, t] {
      for (int64_t x = from + t; x < from + count; x += threads) lay_out(weights, x, images(x));
    });
  }
  for (std::thread& t : pool) t.join();
}

std::string ExpertStore::describe() const {
  if (resident_) return fmt::format("all {} experts in VRAM ({:.2f} GiB)", experts(), gib(device_bytes()));
  return fmt::format("{} of {} experts cached in VRAM ({:.2f} GiB), all in pinned RAM ({:.2f} GiB, {:.1f} GB/s to the GPU)",
                     slots(), experts(), gib(device_bytes()), gib(pinned_bytes()), link_gbps_);
}

std::string ExpertStore::summary() const {
  const auto share = [&](uint64_t part) { return stats_.uses ? 100.0 * double(part) / double(stats_.uses) : 0.0; };
  return fmt::format("experts: {} uses, {:.1f}% in VRAM, {:.1f}% on the CPU, {:.2f} GB copied in", stats_.uses,
                     share(stats_.hits), share(stats_.on_cpu), double(stats_.copied_bytes) / 1e9);
}

std::tuple<uint32_t, uint64_t, int64_t> ExpertStore::key(int64_t slot) const {
  const Slot& s = slot_[size_t(slot)];
  return {uses_[size_t(s.expert)], s.last_use, slot};
}

void ExpertStore::touch(int64_t slot) {
  by_use_.erase(key(slot));
  Slot& s = slot_[size_t(slot)];
  ++uses_[size_t(s.expert)];
  s.last_use = ++clock_;
  by_use_.insert(key(slot));
  if (++since_halving_ < 8 * uses_.size()) return;
  since_halving_ = 0;
  for (uint32_t& u : uses_) u /= 2;
  by_use_.clear();
  for (int64_t t = 0; t < slots(); ++t) by_use_.insert(key(t));
}

void ExpertStore::fill(int64_t slot, int64_t x) {
  using enum LayerRole;
  Slot& s = slot_[size_t(slot)];
  int32_t* table = host_table_.as<int32_t>();
  if (s.expert >= 0) home_[size_t(s.expert)] = table[s.expert] = -1;
  s.expert = x;
  home_[size_t(x)] = slot;
  table[x] = int32_t(slot);
  NT_CUDA_CHECK(cudaStreamWaitEvent(copy_, s.read, 0));  // its last reader is done
  // The file's bytes land, then the GPU re-lays them into the slot; the
  // next miss's copy waits behind this re-lay on the same stream.
  const int64_t layer = x / n_experts_, e = x % n_experts_;
  const LayerWeights& host = host_layers_[size_t(layer)];
  const ExpertMatrices m = place_expert(layout_of(x), slot_base(slot));
  uint8_t* landing = landing_.as<uint8_t>();
  cudaEvent_t traced_end = nullptr;
  if (trace_) {
    const auto [begin, end] = trace_->device_span(fmt::format("layer {} expert {}", layer, e), trace_row_);
    NT_CUDA_CHECK(cudaEventRecord(begin, copy_));
    traced_end = end;
  }
  for (const auto& [role, target] : {std::pair{FfnGateExperts, &m.gate}, std::pair{FfnUpExperts, &m.up},
                                     std::pair{FfnDownExperts, &m.down}}) {
    const WeightRef w = host[role].expert(e);
    const uint64_t bytes = uint64_t(w.rows) * w.row_stride();
    NT_CUDA_CHECK(cudaMemcpyAsync(landing, w.data, bytes, cudaMemcpyHostToDevice, copy_));
    relay_matrix_rows_async(*target, 0, w.rows, landing, copy_);
    landing += bytes;
  }
  NT_CUDA_CHECK(cudaEventRecord(s.landed, copy_));
  if (traced_end) NT_CUDA_CHECK(cudaEventRecord(traced_end, copy_));
  stats_.copied_bytes += copy_bytes_[size_t(layer)];
}

void ExpertStore::pin_file_experts(const ModelWeights& weights, uint64_t total_bytes,
                                   const std::function<void(uint64_t)>& on_bytes) {
  host_ = PinnedBuffer(total_bytes, "the experts in pinned RAM");
  // Each stacked tensor's bytes, in pieces that several threads copy out of the file.
  struct Piece {
    uint8_t* to;
    const uint8_t* from;
    uint64_t bytes;
  };
  std::vector<Piece> pieces;
  constexpr uint64_t kPiece = 64ull << 20;
  uint8_t* at = host_.as<uint8_t>();
  for (const LayerWeights& file_layer : weights.layers) {
    LayerWeights& host = host_layers_.emplace_back(file_layer);
    for (const LayerRole role : kExpertRoles) {
      if (!file_layer.has(role)) continue;
      const uint64_t bytes = file_layer[role].bytes();
      for (uint64_t done = 0; done < bytes; done += kPiece) {
        pieces.push_back({at + done, file_layer[role].data + done, std::min(kPiece, bytes - done)});
      }
      host[role].data = at;
      at += bytes;
    }
    copy_bytes_.push_back(expert_file_bytes(file_layer, kExpertMatrices));
  }
  if (uint64_t(at - host_.as<uint8_t>()) != total_bytes) {
    fail("internal: the experts' file bytes add up to {}, not the plan's {}", at - host_.as<uint8_t>(), total_bytes);
  }
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  const size_t round = threads;  // a piece a thread between progress reports (1 GiB with 16 threads)
  for (size_t first = 0; first < pieces.size(); first += round) {
    const size_t last = std::min(pieces.size(), first + round);
    std::vector<std::thread> pool;
    for (size_t t = 0; t < std::min(threads, last - first); ++t) {
      pool.emplace_back([&, t] {
        for (size_t i = first + t; i < last; i += threads) std::memcpy(pieces[i].to, pieces[i].from, pieces[i].bytes);
      });
    }
    for (std::thread& t : pool) t.join();
    uint64_t bytes = 0;
    for (size_t i = first; i < last; ++i) bytes += pieces[i].bytes;
    on_bytes(bytes);
  }
}

void ExpertStore::count_cpu_use(int64_t layer, int64_t e) {
  ++stats_.uses;
  ++stats_.on_cpu;
  ++uses_[size_t(index(layer, e))];
}

void ExpertStore::begin_layer(int64_t layer, std::span<const int32_t> experts) {
  layer_ = layer;
  ++layer_mark_;
  needed_.assign(experts.begin(), experts.end());
  needed_slot_.assign(needed_.size(), -1);
  copied_.assign(needed_.size(), 0);
  next_miss_ = 0;
  for (size_t i = 0; i < needed_.size(); ++i) {
    const int64_t s = home_[size_t(index(layer, needed_[i]))];
    if (s < 0) continue;
    needed_slot_[i] = s;
    held_[size_t(s)] = layer_mark_;
  }
  copy_misses();
}

// The least used slots (by_use_ order) that hold none of the running layer's
// experts still to compute take its misses, in the order it computes them.
void ExpertStore::copy_misses() {
  auto victim = by_use_.begin();
  for (; next_miss_ < needed_.size(); ++next_miss_) {
    if (needed_slot_[next_miss_] >= 0) continue;
    while (victim != by_use_.end() && held_[size_t(std::get<2>(*victim))] == layer_mark_) ++victim;
    if (victim == by_use_.end()) return;  // the next done() frees one
    take(next_miss_, std::get<2>(*victim));
    victim = by_use_.begin();
  }
}

void ExpertStore::take(size_t i, int64_t slot) {
  by_use_.erase(key(slot));  // its key changes with its expert
  fill(slot, index(layer_, needed_[i]));
  by_use_.insert(key(slot));
  needed_slot_[i] = slot;
  copied_[i] = 1;
  held_[size_t(slot)] = layer_mark_;
}

const ExpertMatrices& ExpertStore::use(size_t i, cudaStream_t compute) {
  if (needed_slot_[i] < 0) {
    // Every slot holds an expert the layer computes later (fewer slots than
    // it needs, its hits at the back): the last of them gives its slot up
    // and waits its turn as a miss.
    size_t j = needed_.size() - 1;
    while (needed_slot_[j] < 0) --j;  // j > i: the experts before i are done and hold no slot
    const int64_t s = needed_slot_[j];
    needed_slot_[j] = -1;
    next_miss_ = std::min(next_miss_, j);
    take(i, s);
  }
  const int64_t s = needed_slot_[i];
  ++stats_.uses;
  if (!copied_[i]) ++stats_.hits;
  if (!resident_) {
    NT_CUDA_CHECK(cudaStreamWaitEvent(compute, slot_[size_t(s)].landed, 0));
    touch(s);
  }
  current_ = place_expert(layouts_[size_t(layer_)], slot_base(s));
  return current_;
}

bool ExpertStore::hold(int64_t layer, std::span<const int32_t> experts, cudaStream_t compute) {
  if (int64_t(experts.size()) > slots()) return false;
  begin_layer(layer, experts);  // as many free slots as misses: every one takes a slot
  for (size_t i = 0; i < needed_.size(); ++i) use(i, compute);
  if (!resident_) {  // the table's row goes after this layer's evictions and copies were decided
    NT_CUDA_CHECK(cudaMemcpyAsync(table_.as<int32_t>() + layer * n_experts_, host_table_.as<int32_t>() + layer * n_experts_,
                                  size_t(n_experts_) * 4, cudaMemcpyHostToDevice, compute));
  }
  return true;
}

void ExpertStore::release(cudaStream_t compute) {
  for (size_t i = 0; i < needed_.size(); ++i) done(i, compute);
}

void ExpertStore::done(size_t i, cudaStream_t compute) {
  const int64_t s = needed_slot_[i];
  if (!resident_) NT_CUDA_CHECK(cudaEventRecord(slot_[size_t(s)].read, compute));
  held_[size_t(s)] = 0;
  copy_misses();
}

}  // namespace nt
