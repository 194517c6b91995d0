#include "engine/hash_memo.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/cached_tensor.h"

namespace tandem::engine {
namespace {

// Each version of a model file leaves a memo behind: keep the most recently written ones.
void prune_memos(const std::filesystem::path& dir) {
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> memos;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) memos.emplace_back(e.last_write_time(ec), e.path());
  }
  if (memos.size() <= kKeptHashMemos) return;
  std::sort(memos.begin(), memos.end());
  for (size_t i = 0; i + kKeptHashMemos < memos.size(); ++i) std::filesystem::remove(memos[i].second, ec);
}

}  // namespace

std::string default_hash_memo_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/tandem/weight-hashes";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.cache/tandem/weight-hashes";
  return "";
}

Result<std::string> hash_memo_path(const std::string& dir, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::not_found(path + ": " + std::strerror(errno));
  std::ostringstream name;
  name << dir << '/' << std::hex << static_cast<uint64_t>(st.st_dev) << '-' << static_cast<uint64_t>(st.st_ino)
       << std::dec << '-' << static_cast<uint64_t>(st.st_size) << '-' << static_cast<int64_t>(st.st_mtim.tv_sec) << '.'
       << static_cast<int64_t>(st.st_mtim.tv_nsec);
  return name.str();
}

HashMemo read_hash_memo(const std::string& memo_file) {
  HashMemo memo;
  std::ifstream in(memo_file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    uint64_t offset = 0, bytes = 0;
    MemoEntry e;
    if (fields >> offset >> bytes >> std::hex >> e.hash >> e.fingerprint) memo[{offset, bytes}] = e;
  }
  return memo;
}

Status write_hash_memo(const std::string& memo_file, const HashMemo& memo) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(memo_file).parent_path(), ec);
  if (ec) return Status::unavailable(memo_file + ": cannot create its folder: " + ec.message());
  const std::string tmp = memo_file + ".part." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [key, e] : memo)
      out << key.first << ' ' << key.second << ' ' << std::hex << e.hash << ' ' << e.fingerprint << std::dec << '\n';
    out.close();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return Status::unavailable(memo_file + ": cannot write the remembered weight hashes");
    }
  }
  std::filesystem::rename(tmp, memo_file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::unavailable(memo_file + ": " + ec.message());
  }
  prune_memos(std::filesystem::path(memo_file).parent_path());
  return Status::ok();
}

uint64_t weight_fingerprint(const uint8_t* data, uint64_t bytes) {
  const uint64_t n = std::min<uint64_t>(bytes, 4096);
  uint64_t h = fnv1a(data, static_cast<size_t>(n));
  h = fnv1a(data + (bytes - n) / 2, static_cast<size_t>(n), h);
  return fnv1a(data + bytes - n, static_cast<size_t>(n), h);
}

}  // namespace tandem::engine
