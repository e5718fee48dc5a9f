// NCCL loaded at run time: a one-rank communicator on one GPU, one process
// over two GPUs, two processes of one GPU each joined through the id file,
// and the error when the library is absent. Each skips, saying why, where
// NCCL or a second GPU is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/multi_gpu/nccl_comm.h"
#include "gpu_test_util.h"
#include "run_self.h"

namespace nt {
namespace {

constexpr size_t kCount = 100003;  // not a multiple of anything NCCL chunks by

// Small integers, so that float sums over ranks are exact.
std::vector<float> rank_input(int rank) {
  std::vector<float> v(kCount);
  for (size_t i = 0; i < kCount; ++i) v[i] = float(int(i % 97) - 48) * float(rank + 1);
  return v;
}

std::vector<float> expected_sum(int n_ranks) {
  std::vector<float> sum(kCount, 0.0f);
  for (int r = 0; r < n_ranks; ++r) {
    const auto v = rank_input(r);
    for (size_t i = 0; i < kCount; ++i) sum[i] += v[i];
  }
  return sum;
}

const NcclLibrary* nccl_or_skip_reason(std::string* why) {
  try {
    return &NcclLibrary::get();
  } catch (const Error& e) {
    *why = e.what();
    return nullptr;
  }
}

#define REQUIRE_NCCL(nccl)                                         \
  std::string nccl_missing;                                        \
  const NcclLibrary* nccl = nccl_or_skip_reason(&nccl_missing);    \
  if (!nccl) GTEST_SKIP() << "NCCL is absent: " << nccl_missing

TEST(Nccl, OneRankAllReduceIsItsInput) {
  REQUIRE_NCCL(nccl);
  std::printf("NCCL %d from %s\n", nccl->version(), nccl->path().c_str());
  const auto comms = NcclComm::join_local_gpus(*nccl, {0});
  const DeviceBuffer send = test::to_device(rank_input(0));
  DeviceBuffer recv = test::poisoned(kCount * 4);
  comms[0]->all_reduce_sum(send.as<float>(), recv.as<float>(), kCount, nullptr);
  EXPECT_EQ(test::to_host<float>(recv, kCount), rank_input(0));
}

TEST(Nccl, OneProcessSumsOverItsGpus) {
  if (test::gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs; this machine has " << test::gpu_count();
  REQUIRE_NCCL(nccl);
  const auto comms = NcclComm::join_local_gpus(*nccl, {0, 1});
  std::vector<DeviceBuffer> buffers;
  for (int r = 0; r < 2; ++r) {
    NT_CUDA_CHECK(cudaSetDevice(r));
    buffers.push_back(test::to_device(rank_input(r)));
  }
  nccl->check(nccl->group_start(), "ncclGroupStart");
  for (int r = 0; r < 2; ++r) comms[size_t(r)]->all_reduce_sum(buffers[size_t(r)].as<float>(), buffers[size_t(r)].as<float>(), kCount, nullptr);
  nccl->check(nccl->group_end(), "ncclGroupEnd");
  for (int r = 0; r < 2; ++r) {
    NT_CUDA_CHECK(cudaSetDevice(r));
    EXPECT_EQ(test::to_host<float>(buffers[size_t(r)], kCount), expected_sum(2)) << "GPU " << r;
  }
  NT_CUDA_CHECK(cudaSetDevice(0));
}

// One rank of TwoProcessesSumOverTwoGpus (the parent sets the environment).
TEST(NcclWorker, AllReduceAsOneRank) {
  const char* rank_text = std::getenv("NT_NCCL_TEST_RANK");
  const char* id_file = std::getenv("NT_NCCL_TEST_ID_FILE");
  if (!rank_text || !id_file) GTEST_SKIP() << "runs as a child of Nccl.TwoProcessesSumOverTwoGpus";
  const int rank = std::atoi(rank_text);
  const NcclLibrary& nccl = NcclLibrary::get();
  NT_CUDA_CHECK(cudaSetDevice(rank));
  const NcclComm comm(nccl, exchange_unique_id(nccl, rank, id_file, 60), 2, rank, rank);
  DeviceBuffer buffer = test::to_device(rank_input(rank));
  comm.all_reduce_sum(buffer.as<float>(), buffer.as<float>(), kCount, nullptr);
  EXPECT_EQ(test::to_host<float>(buffer, kCount), expected_sum(2)) << "rank " << rank;
}

TEST(Nccl, TwoProcessesSumOverTwoGpus) {
  if (test::gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs; this machine has " << test::gpu_count();
  REQUIRE_NCCL(nccl);
  const std::string id_file =
      (std::filesystem::temp_directory_path() / ("nt_nccl_id." + std::to_string(getpid()))).string();
  std::filesystem::remove(id_file);
  int status[2] = {};
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] {
      status[r] = test::run_self("NcclWorker.AllReduceAsOneRank",
                           {"NT_NCCL_TEST_RANK=" + std::to_string(r), "NT_NCCL_TEST_ID_FILE=" + id_file}, 180);
    });
  }
  for (auto& t : ranks) t.join();
  std::filesystem::remove(id_file);
  EXPECT_EQ(status[0], 0) << "rank 0 (-1: timed out)";
  EXPECT_EQ(status[1], 0) << "rank 1 (-1: timed out)";
}

// The child of MissingLibraryErrorSaysWhereItLooked.
TEST(NcclWorker, ReportsTheMissingLibrary) {
  const char* path = std::getenv("NT_NCCL_LIBRARY");
  if (!std::getenv("NT_NCCL_TEST_EXPECT_MISSING") || !path) {
    GTEST_SKIP() << "runs as a child of Nccl.MissingLibraryErrorSaysWhereItLooked";
  }
  try {
    NcclLibrary::get();
    ADD_FAILURE() << "loaded NCCL from " << path << ", which does not exist";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("NT_NCCL_LIBRARY"), std::string::npos) << what;
  }
}

TEST(Nccl, MissingLibraryErrorSaysWhereItLooked) {
  EXPECT_EQ(test::run_self("NcclWorker.ReportsTheMissingLibrary",
                     {"NT_NCCL_LIBRARY=/nonexistent/libnccl.so.2", "NT_NCCL_TEST_EXPECT_MISSING=1"}, 120),
            0);
}

}  // namespace
}  // namespace nt
