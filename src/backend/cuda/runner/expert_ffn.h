// The mixture-of-experts FFN of a layer on one GPU. The router and its top-k
// run on the GPU. Rows that each compute as a one-token step (a decode step,
// stepwise rows) find their experts there too, through the store's slot
// table: one launch for gate and up over every (row, choice) pair, one for
// down, one for the weighted sums; with every expert in VRAM nothing comes
// back to the host, so decode steps replay graphs. Otherwise the chosen
// experts come back (a few bytes a row): the store copies the misses in, and
// wider passes sort their rows by expert and walk the layer's experts in
// ascending order, each over its rows through the pass's products (mat-vec,
// int8 GEMM or cuBLAS by its row count, as a dense layer's matrices do).
// Either way a row adds its experts in ascending order, so its sum does not
// depend on what the cache held. With every expert in VRAM, or the pass's
// held there at once, wider passes take the pairs sorted by expert in chunks
// of a few rows, every expert in one launch a matrix, each pair computed as
// a one-token step computes it, where re-reading an expert for each chunk
// costs less than each expert's launches apart (a prompt chunk of a model of
// many small experts: 128 experts a layer were 896 launches; a batch of
// decode steps as many). When the store caches only some experts,
// the CPU computes some of a narrow pass's misses meanwhile (cpu_experts.h),
// and their sum comes up after the GPU's. The experts' memory is the ExpertStore's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/runner/cpu_experts.h"
#include "backend/cuda/trace_log.h"
#include "backend/cuda/weights/device_matrix.h"
#include "backend/cuda/weights/device_weights.h"
#include "backend/cuda/weights/expert_store.h"
#include "model/arch/model_spec.h"
#include "runtime/expert_pairs.h"

namespace nt {

class LayerPass;
struct Input;
struct MatvecParams;

struct ExpertFfnOptions {
  ExpertMisses misses = ExpertMisses::Auto;  // where the misses of a partial cache compute
  int cpu_threads = 0;                       // the CPU's share of them: 0, one a physical core
  // A Chrome trace of the copies, the GPU's experts and the CPU's, when the
  // store caches only some (empty: none).
  std::string trace_path;
  bool chunks = true;  // CudaRunnerOptions::expert_chunks
};

class ExpertFfn {
 public:
  // Device scratch for passes of up to max_rows rows: what the memory plan reserves.
  static uint64_t scratch_bytes(const ModelSpec& spec, int64_t max_rows);

  ExpertFfn(const ModelSpec& spec, int64_t max_rows, ExpertStore& store, const ExpertFfnOptions& options);

  // x += [post_norm] the mixture of experts of layer l (its router and
  // biases in L) on the normed rows xn [n][dim]; `stepwise`: each row's
  // products computed as a one-token step's are (matvec_stepwise).
  void run(LayerPass& pass, const LayerOnDevice& L, int64_t l, const float* xn, float* x, int64_t n, bool stepwise,
           const float* post_norm);

  ExpertStore& store() const { return store_; }
  // The store's description, and where its misses compute.
  std::string describe() const;

 private:
  // Every row's k experts found on the GPU (the store holds them all): gate
  // and up in one launch over the pairs, down in another, the weighted sum
  // in a third; each pair computed as a one-token step computes it.
  // Layer l's gate and up, activation, then down over `pairs` (row, choice)
  // pairs, their experts' biases by `experts_of` (per pair), the outputs in
  // ye_; `launch` runs each product over all pairs (down: the hidden rows in).
  void pairs_ffn(LayerPass& pass, const LayerOnDevice& L, int64_t l, const Input& in, int64_t pairs,
                 const int32_t* experts_of, const std::function<void(const MatvecParams&, bool down)>& launch);
  // `slot_of`: the layer's slot table (the store's, or stand_in_table's);
  // `weights`: each pair's routing weight (weights_, or masked_weights_).
  void each_row_alone(LayerPass& pass, const LayerOnDevice& L, int64_t l, const float* xn, float* out, int64_t n,
                      const int32_t* slot_of, const float* weights);
  // The store's table row of layer l after hold(), every expert without a
  // slot pointing at a held expert's, and the routing weights with the CPU's
  // pairs zero (masked_weights_): each_row_alone then computes the GPU's
  // experts and adds nothing for the CPU's. Returns the table on the GPU.
  const int32_t* stand_in_table(int64_t l, const int32_t* chosen, const float* weights, int64_t n, cudaStream_t stream);
  // The CPU's experts over the n rows (host copies of the sorted pairs and
  // the weights), while the GPU works, their sum then added into out.
  void add_cpu_sums(int64_t l, const int32_t* routed, const float* weights, int64_t n, float* out, cudaStream_t stream);
  // Sorts each group of rows' pairs by expert into chunks (groups_, records
  // in host_), from the chosen experts on the host; returns whether the
  // chunks' re-reads cost fewer bytes than each needed expert's launches apart.
  bool plan_chunks(int64_t l, const int32_t* chosen, int64_t n);
  // The planned groups, each in one launch a matrix, the experts found
  // through `slot_of` (all of them in VRAM, or held there), the pairs
  // weighted by `weights` (as each_row_alone's).
  void each_expert_in_chunks(LayerPass& pass, const LayerOnDevice& L, int64_t l, const float* xn, float* out,
                             const int32_t* slot_of, const float* weights);

  const ModelSpec& spec_;
  int64_t max_rows_;
  ExpertStore& store_;
  bool chunks_;
  std::unique_ptr<CpuExperts> cpu_;  // when the store caches only some experts and the CPU may take misses
  TraceLog trace_;
  DeviceBuffer scratch_;
  float *logits_ = nullptr, *weights_ = nullptr, *xe_ = nullptr, *ye_ = nullptr, *sum_ = nullptr;
  int32_t *chosen_ = nullptr, *routed_ = nullptr;
  int32_t* group_ = nullptr;  // a group's records on the GPU (PairGroup)
  int32_t* stand_ins_ = nullptr;       // stand_in_table's table row [n_experts]
  float* masked_weights_ = nullptr;    // and weights [rows][k]
  PinnedBuffer stand_ins_host_;        // both, as they cross
  std::vector<char> on_cpu_mark_;      // [n_experts]: the CPU computes it in the running layer
  PinnedBuffer host_;  // the chosen experts [n][k], the (row, choice) pairs sorted by expert, the weights [n][k]
  std::vector<int64_t> start_;     // [n_experts + 1]: each expert's pairs in the sorted list
  std::vector<int64_t> fill_;      // [n_experts]: the next free place of each while sorting
  std::vector<int32_t> needed_;    // the experts some row chose, ascending
  std::vector<PairGroup> groups_;  // each_expert_in_chunks' groups of rows, their records in host_
};

}  // namespace nt
