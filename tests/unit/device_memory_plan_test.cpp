// The host-side memory plan against the documented formulas, worked out here
// independently: the CUDA runner allocates exactly these numbers.
#include "planning/device_memory_plan.h"

#include <gtest/gtest.h>

#include "core/byte_size.h"
#include "core/error.h"
#include "runtime/kernel_shapes.h"

namespace nt {
namespace {

uint64_t al(uint64_t b) { return (b + 255) / 256 * 256; }

struct Shapes {
  int64_t layers, dim, ffn, heads, kv_heads, head_dim, vocab;
  bool tied;
};

ModelSpec llama(const Shapes& s) {
  ModelSpec c;
  c.n_layers = s.layers;
  c.dim = s.dim;
  c.ffn_dim = s.ffn;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.vocab_size = s.vocab;
  c.tied_embeddings = s.tied;
  c.layers.assign(size_t(s.layers), llama_layer(c));
  return c;
}

ModelSpec llama70b() { return llama({80, 8192, 28672, 64, 8, 128, 128256, false}); }  // Llama 3.1 70B
ModelSpec llama1b() { return llama({16, 2048, 8192, 32, 8, 64, 128256, true}); }     // Llama 3.2 1B: a draft beside it

ModelWeights q4k_weights(const ModelSpec& c, bool tied) {
  const auto m = [](int64_t rows, int64_t cols) {
    WeightRef w;
    w.type = TensorType::Q4_K;
    w.rows = rows;
    w.cols = cols;
    return w;
  };
  ModelWeights w;
  w.token_embd = m(c.vocab_size, c.dim);
  if (!tied) w.output = m(c.vocab_size, c.dim);
  LayerWeights l;
  for (LayerRole role : layer_roles(c, 0)) {
    const RoleShape shape = role_shape(c, role);
    if (role_info(role).kind == RoleKind::Matrix) l[role] = m(shape.rows, shape.cols);
  }
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
  const ModelSpec c = llama70b();
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

// The folded norms' inputs hold a row per token of the chunk: a stepwise run
// folds them for each of its rows, as one-token steps do for theirs.
TEST(DeviceMemoryPlan, FoldedNormInputsHoldARowPerToken) {
  const ModelSpec c = llama70b();
  const ActivationLayout a = layout_activations(c, 16, 4096, 132);
  EXPECT_EQ(a.norm_q8_scales - a.norm_q8, al(16 * 8192));
  EXPECT_EQ(a.norm_sumsq - a.norm_q8_scales, al(16 * 8 * 8192 / 32));
  EXPECT_EQ(a.argmax - a.norm_sumsq, al(16 * 4 * 8192 / 32));
}

TEST(DeviceMemoryPlan, BuffersAndReserve) {
  const ModelSpec c = llama70b();
  const ModelWeights w = q4k_weights(c, false);
  const RunnerBuffers one = runner_buffers(c, w, 4000, kv_cache_context(4000), 1, 1, 132);
  EXPECT_EQ(kv_cache_context(4000), 4000);
  EXPECT_EQ(one.kv, 80ull * 4000 * 1024 * 2 * 2);
  EXPECT_EQ(one.gemm, 256ull << 20);  // the head alone would be 2 GiB of F16: capped
  EXPECT_EQ(one.logits, al(4 * 128256));
  // Each of 16 sequences holds a slot of the whole context (whole KV tiles); nothing else grows.
  const RunnerBuffers many = runner_buffers(c, w, 4001, kv_cache_context(4001), 1, 16, 132);
  EXPECT_EQ(many.kv, 16ull * 80 * 4032 * 1024 * 2 * 2);
  EXPECT_EQ(many.gemm, one.gemm);
  EXPECT_EQ(many.page_table, page_table_bytes(16, 4032 / 32));  // a row of pages per sequence
  // A pool of 10000 positions shared by the 16: whole pages of 32 (313 of them), the same block table.
  const RunnerBuffers pooled = runner_buffers(c, w, 4001, kv_cache_context(4001), 1, 16, 132, 10000);
  EXPECT_EQ(pooled.kv, 313ull * 32 * 80 * 1024 * 2 * 2);
  EXPECT_EQ(pooled.page_table, many.page_table);

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
  const ModelSpec c = llama70b();
  const ModelWeights w = q4k_weights(c, false);
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

std::vector<LayerRead> reads_of(const ModelSpec& c, uint64_t bytes) {
  std::vector<LayerRead> reads(size_t(c.n_layers));
  for (auto& r : reads) r.staging_bytes = r.file_bytes = bytes;
  return reads;
}

// The draft is resident whole: its layers, head and norms in device layout,
// the KV slots of as many sequences as the target's, and the buffers its own
// runner allocates at the default prefill chunk.
TEST(DeviceMemoryPlan, DraftTakesItsWholeResidentPlan) {
  const ModelSpec c = llama1b();
  const ModelWeights w = q4k_weights(c, true);
  const std::vector<LayerRead> reads = reads_of(c, 60ull << 20);
  const DraftVram d = draft_vram("draft.gguf", c, w, reads, 4000, 2, 132);
  const uint64_t layer = q4k_bytes(2048 + 2 * 512, 2048) + q4k_bytes(2048, 2048) + 3 * q4k_bytes(8192, 2048);
  EXPECT_EQ(d.weights, 16 * layer + q4k_bytes(128256, 2048) + 2 * 16 * al(4 * 2048) + 2 * al(4 * 2048));
  // 2 sequences x layers x positions x kv_dim x (K, V) x f16, and their block table of 4000 / 32 pages each
  EXPECT_EQ(d.kv_cache, 2ull * 16 * 4000 * 512 * 2 * 2 + page_table_bytes(2, 125));
  const RunnerBuffers b = runner_buffers(c, w, 4000, 4000, kDefaultMaxBatch, 2, 132);
  EXPECT_EQ(d.buffers, b.activations + b.gemm + (64ull << 20) + 2 * (60ull << 20));  // upload buffer, two landing buffers
  EXPECT_EQ(d.path, "draft.gguf");
  // What the draft's runner plans for itself with room for everything: every layer in VRAM.
  const DevicePlacement own = plan_device_placement(c, w, reads, b, 2, 1ull << 40, 1ull << 40);
  EXPECT_EQ(own.plan.count(Tier::Vram), 16);
  EXPECT_EQ(own.plan.vram_total(), d.total());
}

// The 70B at a 4000-token context, and the 1B as its draft.
struct TargetAndDraft {
  ModelSpec config = llama70b();
  ModelWeights weights = q4k_weights(config, false);
  std::vector<LayerRead> reads = reads_of(config, 500ull << 20);
  RunnerBuffers buffers = runner_buffers(config, weights, 4000, kv_cache_context(4000), 1, 1, 132);
  DraftVram draft;

  explicit TargetAndDraft(const std::string& draft_path) {
    const ModelSpec dc = llama1b();
    draft = draft_vram(draft_path, dc, q4k_weights(dc, true), reads_of(dc, 60ull << 20), 4000, 1, 132);
  }
  DevicePlacement plan(uint64_t vram_budget, bool with_draft) const {
    return plan_device_placement(config, weights, reads, buffers, 2, vram_budget, 1ull << 40, with_draft ? &draft : nullptr);
  }
};

// Beside a draft the 70B plans within what the draft leaves: fewer resident
// layers, and the two together within the budget.
TEST(DeviceMemoryPlan, DraftComesOutOfTheTargetsBudget) {
  const TargetAndDraft t("draft.gguf");
  const DraftVram& draft = t.draft;
  const uint64_t budget = 24ull << 30;
  const DevicePlacement alone = t.plan(budget, false);
  const DevicePlacement beside = t.plan(budget, true);
  EXPECT_EQ(beside.request.vram_budget, budget - draft.total());
  EXPECT_EQ(beside.draft.total(), draft.total());
  const uint64_t layer = q4k_bytes(8192 + 2 * 1024, 8192) + q4k_bytes(8192, 8192) + 3 * q4k_bytes(28672, 8192);
  const uint64_t fixed = beside.plan.vram_fixed;
  EXPECT_EQ(uint64_t(beside.plan.count(Tier::Vram)), (budget - draft.total() - fixed - 2 * (500ull << 20)) / layer);
  EXPECT_LT(beside.plan.count(Tier::Vram), alone.plan.count(Tier::Vram));
  EXPECT_LE(beside.plan.vram_total() + draft.total(), budget);
}

TEST(DeviceMemoryPlan, DraftLargerThanTheBudgetNamesTheFileAndTheSizes) {
  const TargetAndDraft t("small-draft.gguf");
  const DraftVram& draft = t.draft;
  const uint64_t budget = draft.total() - 1;
  try {
    t.plan(budget, true);
    ADD_FAILURE() << "a draft larger than the budget was planned";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--draft-model small-draft.gguf"), std::string::npos) << message;
    EXPECT_NE(message.find(format_size(draft.total())), std::string::npos) << message;
    EXPECT_NE(message.find(format_size(budget)), std::string::npos) << message;
    EXPECT_NE(message.find(format_size(draft.kv_cache)), std::string::npos) << message;
  }
  // The draft fits but leaves the target too little to stream every layer: the target's error, with the draft's share.
  try {
    t.plan(draft.total() + (1ull << 30), true);
    ADD_FAILURE() << "a target without room to stream was planned";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("too small"), std::string::npos) << message;
    EXPECT_NE(message.find("beside --draft-model small-draft.gguf, which takes " + format_size(draft.total())),
              std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace nt
