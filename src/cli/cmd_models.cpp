// `ntransformer quantize` and `ntransformer make-model`: producing GGUF files.
#include <fmt/core.h>

#include "cli/commands.h"
#include "core/error.h"
#include "model/quantize_model.h"
#include "model/synthetic_model.h"

namespace nt::cli {
namespace {

QuantScheme parse_scheme(const std::string& name) {
  if (const auto s = quant_scheme_from_name(name)) return *s;
  std::string names;
  for (const auto& info : quant_schemes()) names += (names.empty() ? "" : ", ") + std::string(info.name);
  fail("unknown --type '{}' (choose from {})", name, names);
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "Re-encode a GGUF model (metadata kept, norms stay F32)");
  static std::string in, out, type;
  static int threads = 0;
  cmd->add_option("in", in, "input GGUF")->required()->check(CLI::ExistingFile);
  cmd->add_option("out", out, "output GGUF")->required();
  cmd->add_option("--type", type, "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, "
                                  "q3_k_s/m/l, q4_k_s, q4_k_m, q5_k_s, q5_k_m")->required();
  cmd->add_option("-t,--threads", threads, "Threads (0: all)");
  cmd->callback([] { quantize_model(in, out, parse_scheme(type), threads); });
}

void add_make_model_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-model", "Write a random-weight model of a real architecture");
  static std::string preset, type = "q4_k_m", out;
  static uint64_t seed = 1;
  static bool dry_run = false;
  static float router_skew = 0.0f;
  std::string presets;
  for (const auto& p : model_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  cmd->add_option("--preset", preset, presets)->required();
  cmd->add_option("--type", type, "Quant scheme, as for quantize")->capture_default_str();
  cmd->add_option("--out", out, "Output GGUF")->required();
  cmd->add_option("--seed", seed, "Random seed")->capture_default_str();
  cmd->add_flag("--dry-run", dry_run, "Print the tensor directory and file size without writing");
  cmd->add_option("--router-skew", router_skew,
                  "Mixtures of experts: favour a few experts by about this many router standard deviations, "
                  "more after some tokens than others (0: uniform random routing)")
      ->capture_default_str();
  cmd->callback([] {
    const auto p = find_model_preset(preset);
    if (!p) fail("unknown --preset '{}'", preset);
    write_synthetic_model(*p, parse_scheme(type), seed, out, dry_run, router_skew);
  });
}

}  // namespace nt::cli
