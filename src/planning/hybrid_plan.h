// The CPU as a fourth tier: of the layers that plan_placement leaves in host
// RAM, which ones the CPU computes in place while the link streams the others
// into the GPU, and the predicted time of one forward pass for each choice.
//
// Cost model of one pass of T tokens (a decode step of T sequences, or a
// prefill chunk of T tokens). Four resources work at once, and the layers run
// in index order, so the hidden state passes through every layer in turn:
//   gpu_resident = (resident layers + output head bytes) / gpu_gbps
//   link         = bytes of the streamed layers (RAM and disk) / h2d_gbps
//   disk         = bytes of the disk layers / disk_gbps
//   cpu          = sum over CPU layers of CpuRate::seconds(bytes, T)
//   gpu_streamed = streamed layers' resident bytes / gpu_gbps
//   handoff      = 2 x CPU layers x (handoff_latency + T x hidden bytes / h2d_gbps)
//   link_idle    = sum over CPU layers of max(0, its time - ring_slots x a streamed copy)
//   pass         = gpu_resident + handoff + max(link + link_idle, disk, cpu + gpu_streamed)
// Assumptions:
//  * The link copies the next streamed layer into a free ring slot while the
//    CPU or the GPU computes the layers before it, so copies overlap the
//    non-resident compute; the CPU layers are spread among the streamed
//    ones (spread_cpu_layers) so that each has a copy to hide behind. With
//    ring_slots set, a CPU layer outlasting that many copies (a wide pass)
//    leaves the link idle for the rest: link_idle. CPU work
//    and the GPU work of streamed layers do not overlap each other: the hidden
//    state goes from one to the next.
//  * Resident layers come first and their compute is not overlapped: the
//    ring fills in its first few layers and then waits (conservative by at
//    most ring-slots layers of copying).
//  * Each CPU layer costs two hidden-state copies (GPU -> host, host -> GPU),
//    which is what the spread order gives while CPU layers are at most the
//    streamed ones; adjacent CPU layers would share them, so beyond that the
//    model overcharges by a few microseconds a layer.
//  * GPU time per layer is memory bound: the same for 1 and 64 tokens. The
//    CPU's grows with T (CpuRate), which is why larger passes give the CPU
//    fewer layers. The CPU's attention reads of its layers' host KV cache are
//    left out (for a 70B at 4096 positions, 16 MiB against 500 MB of weights).
//  * A CPU layer's weights are the RAM tier's pinned copy (nothing is copied
//    twice), so the RAM budget is unchanged by the choice; its KV cache on the
//    host would free VRAM, which the plan does not count (conservative).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "planning/placement.h"

namespace nt {

// What the CPU backend computes per second, in GB (1e9 bytes) of weights.
struct CpuRate {
  double decode_gbps = 0;    // one token per pass
  double batch_gbps = 0;     // batch_tokens per pass: weight bytes over pass seconds
  int64_t batch_tokens = 1;  // 1: no batch measurement, the cost is taken as flat in T
  double wide_gbps = 0;      // wide_tokens per pass, when measured (wide_tokens > batch_tokens)
  int64_t wide_tokens = 0;

  // A pass over `bytes` of weights with `tokens` tokens: linear in T through
  // the measured points (the integer kernels re-read each weight block once
  // per group of tokens, so the work per token is about constant past the
  // decode read; wide passes turn compute bound, with a steeper slope past
  // batch_tokens when a wide point is measured), never cheaper than one token.
  double seconds(uint64_t bytes, int64_t tokens) const;
};

// A layer's GPU compute when no rate is given: the 70B Q4_K_M's resident
// decode on the H200 read its weights at 79% of the 4,215 GB/s copy ceiling
// (docs/PERFORMANCE.md). Nothing times GPU kernels per layer before a load.
inline constexpr double kAssumedGpuLayerGbps = 3330.0;

struct HybridRates {
  LinkSpeeds link;
  CpuRate cpu;
  double gpu_gbps = 0;                 // GPU compute of a layer: its resident bytes at this rate
  double handoff_latency_s = 10e-6;    // fixed cost of one hidden-state copy and its wait
  uint64_t hidden_bytes_per_token = 0;  // dim x 4 (F32 hidden state)
  // GPU slots the link fills ahead while a CPU layer computes; a CPU layer
  // longer than that many streamed copies leaves the link idle for the rest.
  // 0: no limit.
  int ring_slots = 0;
};

enum class Path : uint8_t { Vram, Ram, Disk, Cpu };  // Ram and Disk: streamed over the link
std::string_view path_name(Path path);                // "vram", "ram", "disk", "cpu"

struct HybridStep {
  double gpu_resident = 0, link = 0, disk = 0, cpu = 0, gpu_streamed = 0, handoff = 0;
  double link_idle = 0;       // the link waiting on CPU layers with its ring full (HybridRates::ring_slots)
  double overlapped() const;  // max(link + link_idle, disk, cpu + gpu_streamed)
  double seconds() const { return gpu_resident + handoff + overlapped(); }
};

struct HybridPlan {
  std::vector<Path> path;  // per layer
  int64_t tokens = 1;      // tokens per pass the plan is for
  HybridStep step;         // one pass of `tokens` tokens
  int64_t count(Path p) const;
};

// The time of one pass of `tokens` tokens with each layer on `path`.
HybridStep predict_hybrid_step(const ModelFootprint& model, const std::vector<Path>& path, const HybridRates& rates,
                               int64_t tokens);

// Each layer's path when `cpu_layers` of the RAM layers are computed on the
// CPU, spread evenly among them so that streamed copies overlap CPU work.
// Throws nt::Error when cpu_layers is negative or more than the RAM layers.
std::vector<Path> spread_cpu_paths(const PlacementPlan& base, int64_t cpu_layers);

// Which k of n ranked items (0 to n-1) are taken when they are spread
// evenly: the j-th in the middle of the j-th of k equal stretches.
std::vector<int64_t> spread_ranks(int64_t n, int64_t k);

// spread_cpu_paths(base, cpu_layers) with only `share` of its CPU layers
// (spread_ranks among them) left on the CPU, the others streamed: a pass too
// wide for the CPU to take all of its layers.
std::vector<Path> cpu_share_paths(const PlacementPlan& base, int64_t cpu_layers, int64_t share);

// A pass of up to max_tokens tokens (and more than the previous share's)
// gives the CPU `layers` of a split's CPU layers (cpu_share_paths).
struct CpuPassShare {
  int64_t max_tokens = 0;
  int64_t layers = 0;
};

// How a split's cpu_layers serve passes of each width: all of them up to
// all_up_to tokens, then the share in `wider` (ascending).
struct CpuPassPlan {
  int64_t all_up_to = 0;
  std::vector<CpuPassShare> wider;

  // How many of cpu_layers the CPU computes in a pass of `tokens` tokens: all
  // up to all_up_to, then the first wider share that covers it, else none.
  int64_t share(int64_t tokens, int64_t cpu_layers) const;
  // The most tokens of a pass in which the CPU computes any layer.
  int64_t widest() const;
  // Throws nt::Error unless passes of up to all_up_to (at least 1) take all
  // of cpu_layers and the wider shares widen, each 0 to cpu_layers.
  void check(int64_t cpu_layers) const;
};

// For passes of 2, 4, ... up to `widest` tokens, the share of cpu_layers
// (cpu_share_paths) that predicts the fastest pass, the fewest among equals:
// all of them from one token (the decode step they were chosen for) while
// all is best, then each wider pass's share, up to the first width where
// streaming them all is fastest. Without CPU layers, all_up_to is 0.
CpuPassPlan plan_cpu_passes(const ModelFootprint& model, const PlacementPlan& base, const HybridRates& rates,
                            int64_t cpu_layers, int64_t widest);

// spread_cpu_paths with its predicted pass of `tokens` tokens.
HybridPlan spread_cpu_layers(const ModelFootprint& model, const PlacementPlan& base, const HybridRates& rates,
                             int64_t tokens, int64_t cpu_layers);

// Every CPU-layer count from 0 to the RAM layers, index = count.
std::vector<HybridPlan> hybrid_alternatives(const ModelFootprint& model, const PlacementPlan& base,
                                            const HybridRates& rates, int64_t tokens);

// The fastest of hybrid_alternatives (the fewest CPU layers among equals):
// 0 CPU layers unless the CPU predicts a gain.
HybridPlan plan_hybrid(const ModelFootprint& model, const PlacementPlan& base, const HybridRates& rates, int64_t tokens);

}  // namespace nt
