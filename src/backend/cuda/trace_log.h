// A Chrome-trace JSON (chrome://tracing, Perfetto) of spans on named rows,
// host and device work on one time line: device times are measured from an
// origin event that start() records and waits for, host times from the
// moment it returned. Written when the log goes; with no path it records nothing.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace nt {

class TraceLog {
 public:
  using Clock = std::chrono::steady_clock;

  // `rows` name the rows, numbered from 1 in that order.
  TraceLog(std::string path, std::vector<std::string> rows);
  ~TraceLog();  // writes the file; a failure is a warning
  TraceLog(const TraceLog&) = delete;
  TraceLog& operator=(const TraceLog&) = delete;

  bool on() const { return !path_.empty(); }
  bool started() const { return started_; }
  // Host times count from now until start() (work before the first pass).
  void start_host_clock() { origin_time_ = Clock::now(); }
  // The origin of both clocks: recorded on `stream`, waited for.
  void start(cudaStream_t stream);

  double host_us(Clock::time_point t) const;
  double device_us(cudaEvent_t completed) const;
  void span(const std::string& name, int row, double begin_us, double end_us);
  // A span between two points of a stream: record the two events there; its
  // times are read once both have passed (collect(), or when the log goes).
  std::pair<cudaEvent_t, cudaEvent_t> device_span(std::string name, int row);
  // The device spans whose events have passed become spans.
  void collect();

 private:
  std::string path_;
  std::vector<std::string> rows_;
  cudaEvent_t origin_ = nullptr;
  Clock::time_point origin_time_ = Clock::now();
  bool started_ = false;
  std::vector<std::string> spans_;  // JSON objects
  struct DeviceSpan {
    std::string name;
    int row;
    cudaEvent_t begin, end;
  };
  std::vector<DeviceSpan> pending_;
  std::vector<cudaEvent_t> spare_;  // events of collected spans, for the next ones
};

}  // namespace nt
