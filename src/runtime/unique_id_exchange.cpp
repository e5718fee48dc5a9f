#include "runtime/unique_id_exchange.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace nt {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::vector<uint8_t> from_hex(std::string_view text, size_t bytes, std::string_view source) {
  const auto first = text.find_first_not_of(" \t\r\n");
  text = first == std::string_view::npos ? std::string_view() : text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
  if (text.size() != 2 * bytes) {
    fail("{}: expected a {}-byte id as {} hex digits, found {} characters", source, bytes, 2 * bytes, text.size());
  }
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    const int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) fail("{}: '{}' at offset {} is not a hex digit", source, text.substr(2 * i, 2), 2 * i);
    out[i] = uint8_t(hi * 16 + lo);
  }
  return out;
}

void publish_unique_id(const std::string& path, const std::vector<uint8_t>& id) {
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << to_hex(id) << '\n';
    if (!out.flush()) fail("cannot write the communicator id to {}: {}", temporary, std::strerror(errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temporary.c_str());
    fail("cannot publish the communicator id as {}: {}", path, why);
  }
}

std::vector<uint8_t> wait_for_unique_id(const std::string& path, size_t bytes, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    std::ifstream in(path);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      return from_hex(text.str(), bytes, path);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      fail("{}: no communicator id after {:.0f} s; is rank 0 running and writing it there?", path, timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace nt
