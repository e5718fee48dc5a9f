// Expert mat-vecs: a wide pass's pairs sorted by expert and taken in chunks
// (matvec_expert_chunks, runtime/expert_pairs.h) give each pair the numbers
// the one-pair-a-block launch gives it (matvec_experts), bit for bit, for
// every weight format, gated and not, with the experts in scattered slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cuda/kernels/matvec.h"
#include "gpu_test_util.h"
#include "runtime/expert_pairs.h"

namespace nt {
namespace {

class ExpertChunks : public testing::TestWithParam<TensorType> {};

TEST_P(ExpertChunks, GiveEachPairTheNumbersOfItsOwnLaunch) {
  const TensorType type = GetParam();
  // 29 rows of 2 choices among 5 experts: about 12 pairs an expert, two chunks each.
  const int64_t rows = 96, cols = 256, experts = 5, k = 2, n = 29;
  const uint64_t matrix_bytes = align_device(device_matrix_bytes(type, rows, cols));
  const uint64_t slot_bytes = 2 * matrix_bytes;  // gate, then up
  DeviceBuffer slots(size_t(experts + 1) * slot_bytes, "expert slots");
  NT_CUDA_CHECK(cudaMemset(slots.get(), 0xff, slots.size()));
  DeviceBuffer staging(1 << 20, "staging");
  std::vector<int32_t> slot_of(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    slot_of[size_t(e)] = int32_t(experts - e);  // reversed, slot 0 unused: the table is what finds them
    for (int m = 0; m < 2; ++m) {
      const auto bytes = test::random_weights(type, rows, cols);
      const DeviceMatrix target = place_device_matrix(
          type, rows, cols, slots.as<uint8_t>() + uint64_t(slot_of[size_t(e)]) * slot_bytes + uint64_t(m) * matrix_bytes);
      upload_matrix_rows(target, 0, rows, bytes.data(), staging.get(), staging.size());
    }
  }
  std::mt19937 rng(7);
  std::vector<int32_t> chosen(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::copy_n(order.begin(), k, chosen.begin() + t * k);
  }
  std::vector<int32_t> records(size_t(kPairGroupInts * n * k));
  std::vector<PairGroup> groups;
  group_pairs_by_expert(chosen.data(), n, k, experts, n, kMatvecMaxColumns, records.data(), groups);
  ASSERT_EQ(groups.size(), 1u);
  const PairGroup& g = groups[0];
  ASSERT_GT(g.chunks, experts) << "some expert's pairs take several chunks";

  // The rows, and the same rows gathered in the sorted pairs' order.
  const auto x = test::random_floats(size_t(n * cols), -0.05f, 0.05f);
  std::vector<float> gathered(size_t(g.pairs * cols));
  for (int64_t s = 0; s < g.pairs; ++s) {
    std::memcpy(&gathered[size_t(s * cols)], &x[size_t(g.sorted()[s] / k * cols)], size_t(cols) * sizeof(float));
  }
  const auto activations = [&](const std::vector<float>& host, int64_t columns, DeviceBuffer& f32, DeviceBuffer& q8,
                               DeviceBuffer& scales) {
    f32 = test::to_device(host);
    q8 = DeviceBuffer(host.size(), "q8");
    scales = DeviceBuffer(host.size() / 32 * 8 + 8, "q8 scales");
    quantize_activations(f32.as<float>(), columns, cols, q8.as<int8_t>(), scales.as<float2>(), nullptr);
    return Activations{f32.as<float>(), q8.as<int8_t>(), scales.as<float2>()};
  };
  DeviceBuffer x_f32, x_q8, x_scales, g_f32, g_q8, g_scales;
  const Activations by_row = activations(x, n, x_f32, x_q8, x_scales);
  const Activations sorted = activations(gathered, g.pairs, g_f32, g_q8, g_scales);
  const DeviceBuffer d_chosen = test::to_device(chosen), d_slot_of = test::to_device(slot_of);
  const DeviceBuffer d_chunks = test::to_device(std::vector<int32_t>(
      reinterpret_cast<const int32_t*>(g.chunk_list()), reinterpret_cast<const int32_t*>(g.chunk_list() + g.chunks)));

  for (const bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "one matrix");
    MatvecParams p;
    p.w = place_device_matrix(type, rows, cols, slots.get());
    if (gated) p.w_up = place_device_matrix(type, rows, cols, slots.as<uint8_t>() + matrix_bytes);
    p.y_stride = rows;
    DeviceBuffer by_pair = test::poisoned(size_t(g.pairs * rows) * 4), by_chunk = test::poisoned(size_t(g.pairs * rows) * 4);
    p.x = by_row;
    p.y = by_pair.as<float>();
    matvec_experts(p, ExpertRows{d_chosen.as<int32_t>(), d_slot_of.as<int32_t>(), slot_bytes, int(k), false}, g.pairs,
                   nullptr);
    p.x = sorted;
    p.y = by_chunk.as<float>();
    matvec_expert_chunks(p, reinterpret_cast<const ExpertChunk*>(d_chunks.get()), g.chunks, d_slot_of.as<int32_t>(),
                         slot_bytes, nullptr);
    const auto pairs = test::to_host<float>(by_pair, size_t(g.pairs * rows));
    const auto chunks = test::to_host<float>(by_chunk, size_t(g.pairs * rows));
    for (int64_t s = 0; s < g.pairs; ++s) {
      const float* want = &pairs[size_t(g.sorted()[s] * rows)];
      const float* got = &chunks[size_t(s * rows)];
      ASSERT_EQ(std::memcmp(want, got, size_t(rows) * sizeof(float)), 0)
          << "sorted pair " << s << " (pair " << g.sorted()[s] << ", expert " << g.expert_of()[s] << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, ExpertChunks, testing::ValuesIn(test::all_weight_types()),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

}  // namespace
}  // namespace nt
