// The four-tier planner's CPU rate probe times the matrices as the CPU layers
// run them: whole matrices of whole layers.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "engine/cpu_probe.h"
#include "gguf/gguf_file.h"
#include "model/presets.h"
#include "model/synthetic_model.h"
#include "model/tensor_names.h"
#include "quant/tensor_type.h"

namespace nt {
namespace {

TEST(CpuRateProbe, TimesWholeLayersUpToTheWorkingSet) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "nt_cpu_probe_tiny.gguf").string();
  write_synthetic_model(*find_model_preset("tiny"), QuantScheme::Q4_K_M, 1, path);
  const auto file = GgufFile::open(path);
  std::map<int64_t, uint64_t> layer_bytes;  // the layer matrices the CPU layers multiply
  for (const GgufTensorInfo& t : file->header().tensors) {
    const auto layer = layer_of_tensor(t.name);
    if (layer && t.shape.size() == 2 && tensor_type_info(t.type).weight_format) layer_bytes[*layer] += t.n_bytes;
  }
  ASSERT_GE(layer_bytes.size(), 3u);
  const uint64_t first = layer_bytes[0], second = layer_bytes[1];
  // One byte past the first layer: the second is timed whole, the third not at all.
  const CpuRateProbe probe = measure_cpu_rate(*file, 1, 0.02, 1, first + 1);
  EXPECT_EQ(probe.working_set, first + second);
  EXPECT_GT(probe.bytes, 0u);
  EXPECT_GT(probe.gbps, 0.0);
  uint64_t all = 0;
  for (const auto& [layer, bytes] : layer_bytes) all += bytes;
  EXPECT_EQ(measure_cpu_rate(*file, 2, 0.02, 1).working_set, all) << "a model smaller than the working set is timed whole";
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace nt
