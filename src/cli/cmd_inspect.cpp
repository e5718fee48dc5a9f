// `ntransformer inspect FILE`: metadata, tensor directory, per-layer bytes and a model summary.
#include <fmt/core.h>

#include <map>

#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "model/arch/model_spec.h"
#include "model/tensor_names.h"

namespace nt::cli {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

void print_summary(const GgufFile& file) {
  const auto& h = file.header();
  uint64_t params = 0, bytes = 0;
  for (const auto& t : h.tensors) {
    params += uint64_t(t.n_elements());
    bytes += t.n_bytes;
  }
  fmt::print("\nsummary\n");
  fmt::print("  parameters       {} ({:.3f} M)\n", params, double(params) / 1e6);
  fmt::print("  tensor bytes     {} ({})\n", bytes, human_bytes(double(bytes)));
  fmt::print("  bits per weight  {:.3f}\n", params ? 8.0 * double(bytes) / double(params) : 0.0);
  if (!h.find("general.architecture")) return;
  const auto c = read_model_spec(h, file.path());
  fmt::print("  architecture     {}\n", c.architecture);
  fmt::print("  layers           {}\n", c.n_layers);
  fmt::print("  embedding        {}\n", c.dim);
  fmt::print("  feed-forward     {}\n", c.ffn_dim);
  fmt::print("  heads            {} (kv {}, head dim {}, softmax scale {:.4g})\n", c.n_heads, c.n_kv_heads, c.head_dim,
             c.attention_scale);
  fmt::print("  layer blocks     {}\n", describe_layers(c));
  fmt::print("  vocab            {}\n", c.vocab_size);
  fmt::print("  context          {}\n", c.context_length);
  const RopeScaling& s = c.rope_scaling;
  fmt::print("  rope             theta {} dims {} scaling {}{}\n", c.rope_theta, c.rope_dim,
             s.kind == RopeScaling::Kind::Llama3   ? "llama3"
             : s.kind == RopeScaling::Kind::Linear ? "linear"
             : s.kind == RopeScaling::Kind::Yarn   ? fmt::format("yarn x{} from {}", s.factor, s.original_context)
                                                   : "none",
             c.has_rope_freqs_tensor ? " (rope_freqs tensor)" : "");
  fmt::print("  output head      {}\n", c.tied_embeddings ? "tied to token_embd" : "output.weight");
}

void inspect(const std::string& path, size_t max_items) {
  const auto file = GgufFile::open(path);
  const auto& h = file->header();
  fmt::print("file {}\n  GGUF v{}, {} bytes, alignment {}, data at byte {}\n", path, h.version, file->file_size(),
             h.alignment, h.data_offset);

  fmt::print("\nmetadata ({} keys)\n", h.metadata.size());
  for (const auto& kv : h.metadata) {
    fmt::print("  {:<44} {:<6} {}\n", kv.key, gguf_value_type_name(kv.value.type), kv.value.to_display(max_items));
  }

  fmt::print("\ntensors ({})\n", h.tensors.size());
  std::map<int64_t, uint64_t> layer_bytes;
  uint64_t other_bytes = 0;
  for (const auto& t : h.tensors) {
    fmt::print("  {:<32} {:<5} {:>22} {:>14}\n", t.name, tensor_type_name(t.type), shape_string(t.shape), t.n_bytes);
    if (const auto layer = layer_of_tensor(t.name)) {
      layer_bytes[*layer] += t.n_bytes;
    } else {
      other_bytes += t.n_bytes;
    }
  }
  if (!layer_bytes.empty()) {
    fmt::print("\nbytes per layer\n");
    for (const auto& [layer, bytes] : layer_bytes) fmt::print("  blk.{:<4} {:>14}  {}\n", layer, bytes, human_bytes(double(bytes)));
    fmt::print("  other    {:>14}  {}\n", other_bytes, human_bytes(double(other_bytes)));
  }
  print_summary(*file);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata, tensors and model summary");
  static std::string path;
  static size_t max_items = 8;
  cmd->add_option("file", path, "GGUF file")->required();
  cmd->add_option("--max-items", max_items, "Array elements shown per metadata value")->capture_default_str();
  cmd->callback([] { inspect(path, max_items); });
}

}  // namespace nt::cli
