#include "model/quantize_model.h"

#include "core/byte_size.h"
#include "core/output_file.h"
#include "model/arch/model_spec.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/progress.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "quant/quant.h"

namespace nt {
namespace {

// Converts rows [0, rows) of `src` into `dst_type`, in parallel over rows.
void convert_rows(const uint8_t* src, TensorType src_type, uint8_t* dst, TensorType dst_type, int64_t rows,
                  int64_t cols, int threads) {
  const size_t src_stride = row_bytes(src_type, cols), dst_stride = row_bytes(dst_type, cols);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r; (r = next.fetch_add(1)) < rows;) {
      dequantize_row(src_type, src + size_t(r) * src_stride, row.data(), cols);
      quantize_row(dst_type, row.data(), dst + size_t(r) * dst_stride, cols);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace

void quantize_model(const std::string& in_path, const std::string& out_path, QuantScheme scheme, int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  refuse_output_over_input(in_path, "the input", out_path, "the output");
  const auto in = GgufFile::open(in_path);
  const auto& h = in->header();
  const std::string arch = architecture_prefix(h);
  const int64_t n_layers = h.get_int(arch + "block_count", 0);
  const int64_t n_heads = h.get_int(arch + "attention.head_count", 1);
  const int64_t n_gqa = n_heads / std::max<int64_t>(1, h.get_int(arch + "attention.head_count_kv", n_heads));
  const bool has_output = h.find_tensor("output.weight") != nullptr;

  GgufWriter out(out_path, h.version);
  for (const auto& kv : h.metadata) {
    if (kv.key == "general.file_type") continue;
    out.add_metadata(kv.key, kv.value);
  }
  out.add_metadata("general.file_type", GgufValue::of_u32(quant_scheme_info(scheme).file_type));

  std::vector<TensorType> types;
  for (const auto& t : h.tensors) {
    TensorType type = choose_tensor_type(scheme, {t.name, t.shape, n_layers, n_gqa, has_output});
    if (!can_quantize(type) || !can_quantize(t.type) || t.type == type) type = t.type;  // copy as is
    types.push_back(type);
    out.add_tensor(t.name, type, t.shape);
  }

  // Progress in bytes of the input read: redrawn on a terminal; in a log a
  // plain line every half minute (a large model takes many) and the last one.
  uint64_t total = 0, done = 0;
  for (const auto& t : h.tensors) total += t.n_bytes;
  ProgressLine progress(fmt::format("quantizing to {}", quant_scheme_info(scheme).name), 0.0, 30.0);
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& t = h.tensors[i];
    const auto src = in->bytes(t);
    if (types[i] == t.type) {
      out.write_tensor_data(src);
      done += t.n_bytes;
      progress.update(done, total);
    } else {
      // Chunks of rows keep memory constant however large the tensor.
      const int64_t cols = t.row_length(), rows = t.n_rows();
      const size_t src_stride = row_bytes(t.type, cols), dst_stride = row_bytes(types[i], cols);
      const int64_t chunk = std::max<int64_t>(1, int64_t((size_t(64) << 20) / std::max(src_stride, dst_stride)));
      for (int64_t r = 0; r < rows; r += chunk) {
        const int64_t n = std::min(chunk, rows - r);
        buffer.resize(size_t(n) * dst_stride);
        convert_rows(src.data() + size_t(r) * src_stride, t.type, buffer.data(), types[i], n, cols, threads);
        out.write_tensor_data(buffer);
        done += uint64_t(n) * src_stride;
        progress.update(done, total);
      }
    }
  }
  out.finish();
  progress.finish();
  fmt::print(stderr, "wrote {} ({}, was {})\n", out_path, format_size(out.bytes_written()), format_size(in->file_size()));
}

}  // namespace nt
