// The kernels' A/B switches (core/tuning.h) read from the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tuning.h"

namespace nt {
namespace {

constexpr const char* kVariables[] = {"NT_CPU_PREFETCH_BYTES", "NT_CPU_PREFETCH_NTA", "NT_CPU_PIECES_PER_THREAD",
                                      "NT_CPU_GEMM_MIN_TOKENS", "NT_CPU_ISA",          "NT_CUDA_PDL",
                                      "NT_CUDA_COLUMNS_APART",  "NT_HYBRID_RING_SLOTS"};

// Leaves the variables as the test found them.
class TuningEnvironment : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (size_t i = 0; i < std::size(kVariables); ++i) {
      if (saved_[i]) {
        setenv(kVariables[i], saved_[i]->c_str(), 1);
      } else {
        unsetenv(kVariables[i]);
      }
    }
  }
  std::vector<std::optional<std::string>> saved_;
};

// Every field, for comparing two settings whole (gtest prints tuples).
auto fields(const Tuning& t) {
  return std::tie(t.cpu_prefetch_bytes, t.cpu_prefetch_nta, t.cpu_pieces_per_thread, t.cpu_gemm_min_tokens, t.cpu_isa,
                  t.cuda_pdl, t.cuda_columns_apart_waves, t.hybrid_ring_slots);
}

TEST_F(TuningEnvironment, UnsetVariablesKeepTheDefaults) {
  Tuning defaults;
  defaults.hybrid_ring_slots = 5;
  defaults.cpu_isa = "avx2";
  EXPECT_EQ(fields(tuning_from_environment(defaults)), fields(defaults));
}

TEST_F(TuningEnvironment, EachVariableSetsItsField) {
  const std::pair<const char*, const char*> values[] = {
      {"NT_CPU_PREFETCH_BYTES", "0"}, {"NT_CPU_PREFETCH_NTA", "1"}, {"NT_CPU_PIECES_PER_THREAD", "1"},
      {"NT_CPU_GEMM_MIN_TOKENS", "9"}, {"NT_CPU_ISA", "scalar"},     {"NT_CUDA_PDL", "0"},
      {"NT_CUDA_COLUMNS_APART", "0"},  {"NT_HYBRID_RING_SLOTS", "8"}};
  for (const auto& [name, value] : values) setenv(name, value, 1);
  const Tuning want{0, true, 1, 9, "scalar", false, 0, 8};
  EXPECT_EQ(fields(tuning_from_environment()), fields(want));
}

TEST_F(TuningEnvironment, ValuesOutOfRangeNameTheVariable) {
  const std::pair<const char*, const char*> bad[] = {{"NT_CPU_PIECES_PER_THREAD", "0"}, {"NT_CUDA_PDL", "2"},
                                                     {"NT_HYBRID_RING_SLOTS", "9"},    {"NT_CPU_ISA", "sse2"},
                                                     {"NT_CUDA_COLUMNS_APART", "-1"}};
  for (const auto& [name, value] : bad) {
    SCOPED_TRACE(name);
    setenv(name, value, 1);
    try {
      tuning_from_environment();
      ADD_FAILURE() << name << "=" << value << " was taken";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(std::string(name) + "=" + value + ": expected ", 0), 0u) << e.what();
    }
    unsetenv(name);
  }
}

}  // namespace
}  // namespace nt
