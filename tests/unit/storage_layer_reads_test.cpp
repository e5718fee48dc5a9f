// Layer read plans: runs and staging offsets by hand for a small directory,
// then end to end: read every layer of a file with the planned requests and
// find each tensor's own bytes where the plan says.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "storage/io_reader.h"
#include "storage/layer_reads.h"

namespace nt {
namespace {

GgufTensorInfo tensor(std::string name, uint64_t offset, uint64_t bytes) {
  GgufTensorInfo t;
  t.name = std::move(name);
  t.shape = {int64_t(bytes)};
  t.type = TensorType::I8;
  t.offset = offset;
  t.n_bytes = bytes;
  return t;
}

// token_embd, then layer 0 (contiguous), then layer 1 whose ffn tensors sit
// after a 3 MiB hole (another run), then output.
GgufHeader small_header() {
  GgufHeader h;
  h.data_offset = 10000;  // not block aligned, as in real files
  h.tensors = {
      tensor("token_embd.weight", 0, 5000),
      tensor("blk.0.attn_norm.weight", 5024, 64),
      tensor("blk.0.attn_q.weight", 5088, 7000),
      tensor("blk.0.ffn_down.weight", 12096, 9000),
      tensor("blk.1.attn_norm.weight", 21120, 64),
      tensor("blk.1.ffn_up.weight", 21184 + (3 << 20), 4000),
      tensor("blk.1.attn_q.weight", 21184, 7000),
      tensor("output.weight", 25184 + (3 << 20), 6000),
  };
  return h;
}

TEST(StorageLayerReads, RunsAndStagingOffsetsByHand) {
  const GgufHeader h = small_header();
  const auto reads = plan_layer_reads(h, 4096, "small.gguf");
  ASSERT_EQ(reads.size(), 2u);

  const LayerRead& l0 = reads[0];
  ASSERT_EQ(l0.runs.size(), 1u);
  EXPECT_EQ(l0.runs[0].file.offset, 15024u);           // 10000 + 5024
  EXPECT_EQ(l0.runs[0].file.bytes, 21096u - 5024u);    // to the end of ffn_down
  EXPECT_EQ(l0.runs[0].staging_offset, 0u);
  EXPECT_EQ(l0.staging_bytes, 32768u - 12288u);        // [12288, 32768): blocks 3..7
  EXPECT_EQ(l0.tensor_bytes, 64u + 7000u + 9000u);
  EXPECT_EQ(l0.file_bytes, 16072u);
  ASSERT_EQ(l0.tensors.size(), 3u);
  EXPECT_EQ(l0.tensors[0].info->name, "blk.0.attn_norm.weight");
  EXPECT_EQ(l0.tensors[0].staging_offset, 15024u - 12288u);
  EXPECT_EQ(l0.tensors[2].staging_offset, 22096u - 12288u);

  const LayerRead& l1 = reads[1];
  ASSERT_EQ(l1.runs.size(), 2u) << "a 3 MiB hole is more than the 1 MiB gap a run may bridge";
  EXPECT_EQ(l1.runs[0].file.offset, 31120u);
  EXPECT_EQ(l1.runs[0].file.bytes, 64u + 7000u);
  EXPECT_EQ(l1.runs[1].file.offset, 31184u + (3u << 20));
  EXPECT_EQ(l1.runs[1].file.bytes, 4000u);
  EXPECT_EQ(l1.runs[0].staging_offset, 0u);
  EXPECT_EQ(l1.runs[1].staging_offset, 40960u - 28672u);  // run 0 covers [28672, 40960)
  EXPECT_EQ(l1.tensors[2].info->name, "blk.1.ffn_up.weight");
  EXPECT_EQ(l1.tensors[2].staging_offset, 12288u + (31184u + (3u << 20)) % 4096);

  // With a generous gap the hole is read through: one run, more file bytes.
  const auto merged = plan_layer_reads(h, 4096, "small.gguf", 4u << 20);
  ASSERT_EQ(merged[1].runs.size(), 1u);
  EXPECT_EQ(merged[1].file_bytes, (3u << 20) + 64u + 4000u);

  // Alignment 1 (mmap): staging is exactly the bytes read.
  const auto unaligned = plan_layer_reads(h, 1, "small.gguf");
  EXPECT_EQ(unaligned[0].staging_bytes, unaligned[0].file_bytes);
  EXPECT_EQ(unaligned[0].tensors[1].staging_offset, 5088u - 5024u);
}

TEST(StorageLayerReads, MissingLayerIsNamed) {
  GgufHeader h = small_header();
  for (auto& t : h.tensors) {
    if (t.name.starts_with("blk.1.")) t.name.replace(4, 1, "2");
  }
  try {
    plan_layer_reads(h, 4096, "gap.gguf");
    ADD_FAILURE() << "a missing layer was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gap.gguf: no tensors for layer 1"), std::string::npos) << e.what();
  }
}

TEST(StorageLayerReads, PlannedReadsDeliverEachTensorsBytes) {
  const GgufHeader h = small_header();
  const uint64_t file_bytes = h.data_offset + 25184 + (3 << 20) + 6000;
  std::vector<uint8_t> content(file_bytes);
  std::mt19937_64 rng(std::random_device{}());
  for (auto& b : content) b = uint8_t(rng());
  const auto path = std::filesystem::temp_directory_path() / ("nt_layer_reads_" + std::to_string(getpid()) + ".bin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(content.data()), std::streamsize(content.size()));

  for (IoBackend backend : {IoBackend::Auto, IoBackend::Mmap}) {
    ReaderOptions options;
    options.backend = backend;
    auto reader = open_file_reader(path.string(), options).reader;
    std::printf("[ reader   ] %s\n", reader->description().c_str());
    for (const LayerRead& layer : plan_layer_reads(h, reader->alignment(), path.string())) {
      auto* staging = static_cast<uint8_t*>(std::aligned_alloc(4096, (layer.staging_bytes + 4095) / 4096 * 4096));
      std::vector<ReadTicket> tickets;
      for (const auto& run : layer.runs) tickets.push_back(reader->read_async({run.file, staging + run.staging_offset, nullptr}));
      for (const auto& t : tickets) reader->wait(t);
      for (const auto& t : layer.tensors) {
        EXPECT_EQ(std::memcmp(staging + t.staging_offset, content.data() + h.data_offset + t.info->offset, t.info->n_bytes), 0)
            << t.info->name << " via " << io_backend_name(reader->backend());
      }
      std::free(staging);
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace nt
