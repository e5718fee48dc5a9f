// The weights of a mixture of experts: the router and the stacked expert
// tensors by role, each expert's matrix a view into its stack, and shapes
// checked against the spec with errors that name the tensor.
#include <gtest/gtest.h>

#include <filesystem>

#include "error_text.h"
#include "gguf/gguf_file.h"
#include "model/model_weights.h"
#include "model/presets.h"
#include "model/synthetic_model.h"

namespace nt {
namespace {

class MoeWeights : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = (std::filesystem::path(::testing::TempDir()) / "nt_weights_tiny_qwen3moe.gguf").string();
    write_synthetic_model(*find_model_preset("tiny-qwen3moe"), QuantScheme::Q8_0, 1, path_);
  }
  static void TearDownTestSuite() { std::filesystem::remove(path_); }
  static inline std::string path_;
};

TEST_F(MoeWeights, ExpertsAreSlicesOfTheirStack) {
  const auto file = GgufFile::open(path_);
  const ModelSpec spec = read_model_spec(file->header(), path_);
  const ModelWeights w = load_model_weights(*file, spec);
  const LayerWeights& layer = w.layers[2];
  EXPECT_FALSE(layer.has(LayerRole::FfnGate));
  const WeightRef& router = layer[LayerRole::FfnRouter];
  EXPECT_EQ(router.type, TensorType::F32);  // the router is never quantized
  EXPECT_EQ(router.rows, 8);
  const WeightRef& down = layer[LayerRole::FfnDownExperts];
  EXPECT_EQ(down.experts, 8);
  EXPECT_EQ(down.rows, 8 * spec.dim);
  const WeightRef fifth = down.expert(5);
  EXPECT_EQ(fifth.rows, spec.dim);
  EXPECT_EQ(fifth.cols, 256);
  EXPECT_EQ(fifth.experts, 0);
  EXPECT_EQ(fifth.type, TensorType::Q8_0);
  EXPECT_EQ(fifth.data, file->data(file->header().tensor("blk.2.ffn_down_exps.weight")) + 5 * down.bytes() / 8);
}

TEST_F(MoeWeights, AStackOfTheWrongShapeIsNamed) {
  const auto file = GgufFile::open(path_);
  ModelSpec spec = read_model_spec(file->header(), path_);
  spec.layers[0].moe.n_experts = 4;
  EXPECT_EQ(test::error_of([&] { load_model_weights(*file, spec); }),
            path_ + ": tensor 'blk.0.ffn_gate_inp.weight' has shape [256, 8] but the config implies [256, 4]");
  spec.layers[0].moe.n_experts = 8;
  spec.layers[0].moe.expert_ffn_dim = 128;
  EXPECT_EQ(test::error_of([&] { load_model_weights(*file, spec); }),
            path_ + ": tensor 'blk.0.ffn_gate_exps.weight' has shape [256, 256, 8] but the config implies "
                    "[256, 128, 8] (8 experts of 128 x 256)");
}

}  // namespace
}  // namespace nt
