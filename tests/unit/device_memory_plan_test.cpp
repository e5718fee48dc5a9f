// The host-side memory plan against the documented formulas, worked out here
// independently: the CUDA runner allocates exactly these numbers.
#include "runtime/device_memory_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/kernel_shapes.h"

namespace nt {
namespace {

uint64_t al(uint64_t b) { return (b + 255) / 256 * 256; }

// Llama 3.1 70B shapes.
LlamaConfig llama70b() {
  LlamaConfig c;
  c.n_layers = 80;
  c.dim = 8192;
  c.ffn_dim = 28672;
  c.n_heads = 64;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  return c;
}

LlamaWeights q4k_weights(const LlamaConfig& c, bool tied) {
  const auto m = [](int64_t rows, int64_t cols) {
    WeightRef w;
    w.type = TensorType::Q4_K;
    w.rows = rows;
    w.cols = cols;
    return w;
  };
  LlamaWeights w;
  w.token_embd = m(c.vocab_size, c.dim);
  if (!tied) w.output = m(c.vocab_size, c.dim);
  LlamaLayerWeights l;
  l.wq = m(c.q_dim(), c.dim);
  l.wk = m(c.kv_dim(), c.dim);
  l.wv = m(c.kv_dim(), c.dim);
  l.wo = m(c.dim, c.q_dim());
  l.w_gate = m(c.ffn_dim, c.dim);
  l.w_up = m(c.ffn_dim, c.dim);
  l.w_down = m(c.dim, c.ffn_dim);
  w.layers.assign(size_t(c.n_layers), l);
  return w;
}

// Q4_K in device layout: 128 code bytes and 16 scale bytes per 256 elements, each plane aligned.
uint64_t q4k_bytes(uint64_t rows, uint64_t cols) { return al(rows * cols / 256 * 128) + al(rows * cols / 256 * 16); }

TEST(DeviceMemoryPlan, DeviceLayoutSizes) {
  EXPECT_EQ(device_matrix_bytes(TensorType::Q4_K, 8192, 8192), q4k_bytes(8192, 8192));
  EXPECT_EQ(device_matrix_bytes(TensorType::F16, 3, 40), al(3 * 40 * 2));
  EXPECT_THROW(device_matrix_bytes(TensorType::Q4_K, 4, 128), Error);
  EXPECT_THROW(device_matrix_bytes(TensorType::F32, 4, 42), Error);
}

// Decode only (batch 1): one key split per wave of two blocks an SM per KV head, at least 64 keys each.
TEST(DeviceMemoryPlan, DecodeActivationArena) {
  const LlamaConfig c = llama70b();
  for (const int sms : {132, 16}) {
    const uint64_t splits = std::min<uint64_t>(2 * sms / 8, 4096 / 64);
    const uint64_t partial_floats = splits * 64 * (128 + 2);
    const uint64_t wide = 28672;  // the widest matrix input: ffn_dim
    const uint64_t expected = al(4 * (2 + 5)) + al(4 * 8192) + al(4 * wide) + al(4 * (8192 + 2 * 1024)) + al(4 * 8192) +
                              3 * al(4 * 28672) + al(4 * 128256) + al(4 * partial_floats) + al(wide) + al(8 * wide / 32) +
                              al(2 * wide) + al(8192) + al(8 * 8192 / 32) + al(4 * 8192 / 32) + al(4) +
                              al((128256 + 4095) / 4096 * 8) + al(4) + al(8 * 256 + 4) + al((128256 + 4095) / 4096 * 513 * 4);
    const ActivationLayout a = layout_activations(c, 1, 4096, sms);
    EXPECT_EQ(a.partial_floats, partial_floats) << sms << " SMs";
    EXPECT_EQ(a.total, expected) << sms << " SMs";
  }
}

TEST(DeviceMemoryPlan, BuffersAndReserve) {
  const LlamaConfig c = llama70b();
  const LlamaWeights w = q4k_weights(c, false);
  const RunnerBuffers one = runner_buffers(c, w, 4000, kv_cache_context(4000), 1, 1, 132);
  EXPECT_EQ(kv_cache_context(4000), 4000);
  EXPECT_EQ(one.kv, 80ull * 4000 * 1024 * 2 * 2);
  EXPECT_EQ(one.gemm, 256ull << 20);  // the head alone would be 2 GiB of F16: capped
  EXPECT_EQ(one.logits, al(4 * 128256));
  // Each of 16 sequences holds a slot of the whole context (whole KV tiles); nothing else grows.
  const RunnerBuffers many = runner_buffers(c, w, 4001, kv_cache_context(4001), 1, 16, 132);
  EXPECT_EQ(many.kv, 16ull * 80 * 4032 * 1024 * 2 * 2);
  EXPECT_EQ(many.gemm, one.gemm);

  std::vector<LayerRead> reads(80);
  for (auto& r : reads) r.staging_bytes = r.file_bytes = 500ull << 20;
  const ModelFootprint f = device_footprint(c, w, reads);
  const uint64_t layer = q4k_bytes(8192 + 2 * 1024, 8192) + q4k_bytes(8192, 8192) + 3 * q4k_bytes(28672, 8192);
  EXPECT_EQ(f.layers[0].resident_bytes, layer);
  EXPECT_EQ(f.output_head_bytes, q4k_bytes(128256, 8192));
  EXPECT_EQ(f.small_bytes, 2 * 80 * al(4 * 8192) + 2 * al(4 * 8192) + q4k_bytes(128256, 8192));
  const VramReserve r = vram_reserve(one, f);
  EXPECT_EQ(r.staging, (64ull << 20) + 2 * (500ull << 20));
  EXPECT_EQ(r.activations + r.logits, one.activations);

  const DevicePlacement p = plan_device_placement(c, w, reads, one, 2, 24ull << 30, 1ull << 40);
  const uint64_t fixed = f.output_head_bytes + f.small_bytes + r.total();
  EXPECT_EQ(p.plan.vram_fixed, fixed);
  EXPECT_EQ(uint64_t(p.plan.count(Tier::Vram)), ((24ull << 30) - fixed - 2 * (500ull << 20)) / layer);  // ring slots hold the larger staging
}

// A layer split's stage allocates what the multi-GPU planner reserves on its
// GPU: the KV slots of its layers, the logits rows only with the head, and
// the token embedding (always resident on the CUDA runner) on the first.
TEST(DeviceMemoryPlan, StageBuffersAreWhatTheLayerSplitReserves) {
  const LlamaConfig c = llama70b();
  const LlamaWeights w = q4k_weights(c, false);
  std::vector<LayerRead> reads(80);
  for (auto& r : reads) r.staging_bytes = r.file_bytes = 500ull << 20;
  const ModelFootprint f = device_footprint(c, w, reads);
  EXPECT_EQ(f.resident_embedding_bytes, q4k_bytes(128256, 8192));
  const int64_t context = 4096, batch = 512;
  const int sequences = 2, sms = 132;
  const RunnerBuffers whole = runner_buffers(c, w, context, kv_cache_context(context), batch, sequences, sms);
  const std::vector<GpuResources> gpus = {{0, 1ull << 40, 0, 0}, {1, 1ull << 40, 0, 0}};
  const MultiGpuRequest r = device_multi_gpu_request(GgufHeader{}, c, f, whole, gpus, 1ull << 40, 2);
  const MultiGpuPlan plan = place_multi_gpu(f, r, Split::Layer);
  ASSERT_EQ(plan.gpus.size(), 2u);
  for (size_t g = 0; g < 2; ++g) {
    const int64_t layers = plan.gpus[g].end_layer - plan.gpus[g].first_layer;
    const bool head = g == 1;
    const RunnerBuffers b = stage_buffers(c, w, context, kv_cache_context(context), batch, sequences, sms, layers, head);
    EXPECT_EQ(b.kv, whole.kv / 80 * uint64_t(layers));
    EXPECT_EQ(b.logits, head ? whole.logits : 0);
    EXPECT_EQ(b.activations, whole.activations - (head ? 0 : whole.logits));
    const uint64_t held = head ? f.output_head_bytes + f.small_bytes - f.resident_embedding_bytes : f.resident_embedding_bytes;
    EXPECT_EQ(plan.gpus[g].plan.vram_fixed, held + vram_reserve(b, f).total()) << "GPU " << g;
  }
}

TEST(DeviceMemoryPlan, FreeVramIsSharedByTheStagesOfAGpu) {
  const uint64_t GiB = 1ull << 30;
  EXPECT_EQ(free_vram_budgets({0, 1, 0}, {10 * GiB, 8 * GiB, 10 * GiB}),
            (std::vector<uint64_t>{(10 * GiB - 2 * kMemoryMarginBytes) / 2, 8 * GiB - kMemoryMarginBytes,
                                   (10 * GiB - 2 * kMemoryMarginBytes) / 2}));
  EXPECT_EQ(free_vram_budgets({3}, {kMemoryMarginBytes / 2}), (std::vector<uint64_t>{0}));
}

}  // namespace
}  // namespace nt
