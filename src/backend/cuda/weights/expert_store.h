// Where a mixture of experts' experts live on one GPU, expert by expert:
// all in VRAM when the budget holds them, else a VRAM cache of slots in
// front of a pinned-RAM copy of every expert in the file's layout, which the
// CPU computes from (cpu_experts.h) and a miss copies from: into a landing
// buffer, then re-laid into its slot on the GPU. The cache evicts, of the experts
// the running layer does not need, the one used least often since load
// (counts halve as uses pass eight per expert, so that the cache follows a
// changing workload), the least recently used of those tied. Counting keeps
// a stable share when a pass cycles through more experts than the cache
// holds (decode batches at uniform routing), where recency alone keeps none. Copies run on
// a stream of their own, ordered against the computation by two events a
// slot: a copy waits until the slot's last reader is done, a reader until
// its copy has landed.
//
// A layer's pass (expert_ffn.h): begin_layer with the experts its rows
// chose, in ascending order; then for each of them in that order use(i)
// before its products and done(i) after them. Misses start copying at
// begin_layer into free slots, and into the slots of experts already
// computed as those finish, so the link works while the hits compute.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <set>
#include <tuple>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/trace_log.h"
#include "backend/cuda/weights/device_matrix.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "planning/expert_plan.h"

namespace nt {

struct ExpertMatrices {
  DeviceMatrix gate, up, down;
};

// An expert's matrices laid out from `base` as `layout` says.
ExpertMatrices place_expert(const ExpertLayout& layout, uint8_t* base);

// What the cache did, since load.
struct ExpertCacheStats {
  uint64_t uses = 0, hits = 0, on_cpu = 0;  // on_cpu: misses the CPU computed instead of copying
  uint64_t copied_bytes = 0;
};

class ExpertStore {
 public:
  // The experts of every layer of `spec` from `weights` as `plan` places
  // them: all in VRAM, or plan.slots of them cached over pinned copies of
  // all. Errors name the sizes. on_progress(bytes, total) as they load.
  // `counts` (calibrate-experts', [layer * experts + expert], or empty)
  // choose the experts VRAM starts with and seed the use counts.
  ExpertStore(const ModelSpec& spec, const ModelWeights& weights, const ExpertPlan& plan, std::span<const uint64_t> counts,
              const std::function<void(uint64_t, uint64_t)>& on_progress);
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  bool all_resident() const { return resident_; }
  int64_t slots() const { return int64_t(slot_.size()); }
  int64_t experts() const { return int64_t(home_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }  // the largest expert's three matrices on the GPU
  uint64_t device_bytes() const { return slots_.size() + landing_.size(); }
  uint64_t pinned_bytes() const { return host_.size(); }
  const ExpertCacheStats& stats() const { return stats_; }
  // "all 1024 experts in VRAM", or "512 of 6144 experts cached in VRAM (1.50 GiB), the rest in pinned RAM".
  std::string describe() const;
  // What the cache did: "experts: 1,536 uses, 41.2% in VRAM, 20.3% on the CPU, 2.31 GB copied in".
  std::string summary() const;

  // Whether the layer's expert e is in VRAM now.
  bool in_vram(int64_t layer, int64_t e) const { return home_[size_t(index(layer, e))] >= 0; }
  // The layer's stacked experts in pinned RAM, as the file lays them out (the
  // other roles point into the file): what the CPU computes a miss from. Only
  // when not every expert is resident.
  const LayerWeights& host_layer(int64_t layer) const { return host_layers_[size_t(layer)]; }
  // The bytes a miss of the layer copies over the link: its matrices in the file's layout.
  uint64_t copy_bytes(int64_t layer) const { return copy_bytes_[size_t(layer)]; }
  // The link's rate, GB/s, as the first slots' copies at load measured it (0: not measured).
  double link_gbps() const { return link_gbps_; }
  // The layer's expert e computed on the CPU in place of a miss: a use, counted as the cache counts its own.
  void count_cpu_use(int64_t layer, int64_t e);
  // Each copy from now on is a span on `row` of `log` (a started one).
  void trace_copies(TraceLog* log, int row) {
    trace_ = log;
    trace_row_ = row;
  }

  // Every expert of `layer` where kernels find it: slot slot_of(layer)[e] of
  // the slots from slot0(layer) on, slot_bytes() apart (ExpertRows, matvec.h).
  ExpertMatrices slot0(int64_t layer) const { return place_expert(layouts_[size_t(layer)], slots_.as<uint8_t>()); }
  const int32_t* slot_of(int64_t layer) const { return table_.as<int32_t>() + layer * n_experts_; }
  // The same table on the host, as of the last fill (-1: not in VRAM).
  const int32_t* host_slot_of(int64_t layer) const { return host_table_.as<int32_t>() + layer * n_experts_; }

  // All of the layer's `experts` (ascending) in VRAM at once, for kernels
  // that find them through slot_of: false when they outnumber the slots.
  // Otherwise `compute` waits for their copies and the layer's row of the
  // table; release() after the kernels are queued.
  bool hold(int64_t layer, std::span<const int32_t> experts, cudaStream_t compute);
  void release(cudaStream_t compute);

  // The running layer's experts (ascending): the misses start copying into
  // the slots they may take (each copy waits for its slot's last reader).
  void begin_layer(int64_t layer, std::span<const int32_t> experts);
  // Expert i of begin_layer's list, `compute` ordered after its copy.
  const ExpertMatrices& use(size_t i, cudaStream_t compute);
  // Its products are queued on `compute`: its slot may take another expert once they ran.
  void done(size_t i, cudaStream_t compute);

 private:
  struct Slot {
    cudaEvent_t landed = nullptr, read = nullptr;
    int64_t expert = -1;               // the expert held (an index into home_), or -1
    uint64_t last_use = 0;
  };
  int64_t index(int64_t layer, int64_t e) const { return layer * n_experts_ + e; }
  const ExpertLayout& layout_of(int64_t x) const { return layouts_[size_t(x / n_experts_)]; }
  uint8_t* slot_base(int64_t slot) const { return slots_.as<uint8_t>() + uint64_t(slot) * slot_bytes_; }
  // Writes expert x's device image (its layer's layout) at `image`, from the file's blocks.
  void lay_out(const ModelWeights& weights, int64_t x, uint8_t* image) const;
  // Lays out experts [0, count) with `threads` threads, image of x at images(x).
  void lay_out_all(const ModelWeights& weights, int64_t from, int64_t count, const std::function<uint8_t*(int64_t)>& images) const;
  // Copies every layer's stacked experts from the file into host_ and points host_layers_ at them.
  void pin_file_experts(const ModelWeights& weights, uint64_t total_bytes, const std::function<void(uint64_t)>& on_bytes);
  // Puts expert x's copy into `slot`, evicting what it held.
  void fill(int64_t slot, int64_t x);
  // Queues copies of the running layer's misses into the slots it may take.
  void copy_misses();
  // The running layer's expert i copies into `slot`.
  void take(size_t i, int64_t slot);
  // The slot's expert was used now: its count and place in by_use_.
  void touch(int64_t slot);
  // Its key in by_use_.
  std::tuple<uint32_t, uint64_t, int64_t> key(int64_t slot) const;

  int64_t n_experts_ = 0;  // a layer's
  bool resident_ = false;
  std::vector<ExpertLayout> layouts_;  // per layer
  uint64_t slot_bytes_ = 0;
  DeviceBuffer slots_;
  PinnedBuffer host_;  // every layer's stacked experts as in the file, when not all are resident
  std::vector<LayerWeights> host_layers_;  // per layer, its expert roles pointing into host_
  std::vector<uint64_t> copy_bytes_;       // per layer, one expert's matrices in the file's layout
  DeviceBuffer landing_;                   // a miss's file bytes, before their re-lay into its slot
  double link_gbps_ = 0;
  DeviceBuffer table_;        // [layers][n_experts]: each expert's slot (-1: none), as of the last hold() of its layer
  PinnedBuffer host_table_;   // the same, kept by fill()
  std::vector<Slot> slot_;
  std::vector<int64_t> home_;  // per expert, the slot holding it (-1: none)
  std::vector<uint32_t> uses_;  // per expert, its uses (halved now and then)
  std::set<std::tuple<uint32_t, uint64_t, int64_t>> by_use_;  // slots by (their expert's uses, last use): victims first
  uint64_t clock_ = 0, since_halving_ = 0;
  cudaStream_t copy_ = nullptr;
  ExpertCacheStats stats_;
  TraceLog* trace_ = nullptr;
  int trace_row_ = 0;

  // The running layer.
  int64_t layer_ = 0;
  ExpertMatrices current_;
  std::vector<int32_t> needed_;
  std::vector<int64_t> needed_slot_;  // per needed expert, its slot once it has one (-1: a miss not yet queued)
  std::vector<char> copied_;          // per needed expert: it missed, and copies in for this layer
  std::vector<uint64_t> held_;        // per slot: == layer_mark_ while it holds one of the layer's experts not yet computed
  uint64_t layer_mark_ = 0;
  size_t next_miss_ = 0;              // needed_ index from which misses may still lack a slot
};

}  // namespace nt
