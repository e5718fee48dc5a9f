#include "backend/cuda/trace_log.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_check.h"
#include "core/output_file.h"

namespace nt {

TraceLog::TraceLog(std::string path, std::vector<std::string> rows) : path_(std::move(path)), rows_(std::move(rows)) {
  if (on()) NT_CUDA_CHECK(cudaEventCreate(&origin_));
}

TraceLog::~TraceLog() {
  if (!on()) return;
  for (const DeviceSpan& d : pending_) cudaEventSynchronize(d.end);
  try {
    collect();
    std::string out = "{\"traceEvents\":[\n";
    for (size_t row = 0; row < rows_.size(); ++row) {
      const nlohmann::json m = {{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", row + 1}, {"args", {{"name", rows_[row]}}}};
      out += m.dump() + ",\n";
    }
    for (size_t i = 0; i < spans_.size(); ++i) out += spans_[i] + (i + 1 < spans_.size() ? ",\n" : "\n");
    out += "]}\n";
    write_file_atomically(path_, "--trace", out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: %s\n", e.what());
  }
  for (const DeviceSpan& d : pending_) spare_.insert(spare_.end(), {d.begin, d.end});
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  cudaEventDestroy(origin_);
}

void TraceLog::start(cudaStream_t stream) {
  if (!on()) return;
  NT_CUDA_CHECK(cudaEventRecord(origin_, stream));
  NT_CUDA_CHECK(cudaEventSynchronize(origin_));
  origin_time_ = Clock::now();
  started_ = true;
}

double TraceLog::host_us(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_time_).count();
}

double TraceLog::device_us(cudaEvent_t completed) const {
  float ms = 0;
  NT_CUDA_CHECK(cudaEventElapsedTime(&ms, origin_, completed));
  return double(ms) * 1e3;
}

std::pair<cudaEvent_t, cudaEvent_t> TraceLog::device_span(std::string name, int row) {
  cudaEvent_t events[2];
  for (cudaEvent_t& e : events) {
    if (spare_.empty()) {
      NT_CUDA_CHECK(cudaEventCreate(&e));
    } else {
      e = spare_.back();
      spare_.pop_back();
    }
  }
  pending_.push_back({std::move(name), row, events[0], events[1]});
  return {events[0], events[1]};
}

void TraceLog::collect() {
  std::erase_if(pending_, [&](const DeviceSpan& d) {
    if (cudaEventQuery(d.end) != cudaSuccess) return false;
    span(d.name, d.row, device_us(d.begin), device_us(d.end));
    spare_.insert(spare_.end(), {d.begin, d.end});
    return true;
  });
}

void TraceLog::span(const std::string& name, int row, double begin_us, double end_us) {
  if (!on()) return;
  const nlohmann::json e = {{"name", name}, {"ph", "X"},       {"pid", 0},
                            {"tid", row},   {"ts", begin_us}, {"dur", std::max(0.0, end_us - begin_us)}};
  spans_.push_back(e.dump());
}

}  // namespace nt
