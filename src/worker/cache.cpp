#include "worker/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "plan/model_info.h"

namespace fs = std::filesystem;

namespace tandem::worker {

namespace {

bool is_hash_name(const std::string& n) { return parse_hash_name(n).has_value(); }

// Writes all of `data` to `fd`, resuming after short writes (a filling disk gives those first).
Status write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t w = ::write(fd, data, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      return Status::resource_exhausted("writing cache file " + path + ": " +
                                        (w < 0 ? std::strerror(errno) : "no progress"));
    }
    data += w;
    size -= static_cast<size_t>(w);
  }
  return Status::ok();
}

// Reads `bytes` at `offset` of `path` in chunks, hashing and optionally copying them to `out_fd`
// (the file `out_path`).
Result<uint64_t> hash_range(int fd, const std::string& path, uint64_t offset, uint64_t bytes, int out_fd,
                            const std::string& out_path = "") {
  std::vector<char> buf(8 << 20);
  uint64_t hash = 0xcbf29ce484222325ULL;
  uint64_t done = 0;
  while (done < bytes) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - done));
    const ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(offset + done));
    if (r <= 0) return Status::invalid_argument(path + ": truncated or unreadable tensor data");
    hash = fnv1a(buf.data(), static_cast<size_t>(r), hash);
    if (out_fd >= 0) TANDEM_RETURN_IF_ERROR(write_all(out_fd, buf.data(), static_cast<size_t>(r), out_path));
    done += static_cast<uint64_t>(r);
  }
  return hash;
}

// Owns the descriptors of a model's files; move-only so that no copy closes them early.
struct OpenFiles {
  std::vector<int> fds;
  OpenFiles() = default;
  OpenFiles(OpenFiles&& o) noexcept : fds(std::move(o.fds)) { o.fds.clear(); }
  OpenFiles(const OpenFiles&) = delete;
  ~OpenFiles() {
    for (int fd : fds) ::close(fd);
  }
};

Result<OpenFiles> open_all(const plan::ModelInfo& info) {
  OpenFiles f;
  for (const auto& p : info.files) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::not_found(p + ": " + std::strerror(errno));
    f.fds.push_back(fd);
  }
  return f;
}

}  // namespace

Result<std::vector<CacheEntry>> list_cache(const std::string& dir) {
  std::vector<CacheEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    struct stat st {};
    if (!is_hash_name(name) || ::stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({name, static_cast<uint64_t>(st.st_size), std::max(st.st_atime, st.st_mtime)});
  }
  if (ec) return Status::not_found("cache folder " + dir + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.name < b.name;
  });
  return out;
}

CacheStats cache_stats(const std::string& dir) {
  CacheStats s;
  auto entries = list_cache(dir);
  if (!entries.is_ok()) return s;
  for (const auto& e : entries.value()) {
    ++s.entries;
    s.bytes += e.bytes;
  }
  return s;
}

Result<uint64_t> enforce_cache_limit(const std::string& dir, uint64_t max_bytes) {
  auto entries = list_cache(dir);
  if (!entries.is_ok()) return entries.status();
  uint64_t total = 0, removed = 0;
  for (const auto& e : entries.value()) total += e.bytes;
  for (const auto& e : entries.value()) {
    if (total <= max_bytes) break;
    std::error_code ec;
    if (fs::remove(fs::path(dir) / e.name, ec)) {
      total -= e.bytes;
      removed += e.bytes;
    }
  }
  return removed;
}

Result<SeedResult> seed_cache(const SeedOptions& o) {
  auto info = plan::read_model_info(o.model);
  if (!info.is_ok()) return info.status();
  if (info->header_only) return Status::invalid_argument(o.model + ": a header-only file has no weights to seed");
  std::error_code ec;
  fs::create_directories(o.cache_dir, ec);
  if (ec) return Status::invalid_argument("cache folder " + o.cache_dir + ": " + ec.message());
  auto files = open_all(info.value());
  if (!files.is_ok()) return files.status();
  SeedResult r;
  for (const auto& t : info->tensors) {
    if (t.layer >= 0 && o.first_layer >= 0 && (t.layer < o.first_layer || t.layer > o.last_layer)) continue;
    if (t.bytes <= kSeedThreshold) {
      ++r.tensors_small;
      r.bytes_small += t.bytes;
      continue;
    }
    const int fd = files->fds[t.split];
    const std::string& path = info->files[t.split];
    auto hash = hash_range(fd, path, t.file_offset, t.bytes, -1);
    if (!hash.is_ok()) return hash.status();
    const fs::path dest = fs::path(o.cache_dir) / hash_name(hash.value());
    struct stat st {};
    if (::stat(dest.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == t.bytes) {
      ++r.tensors_present;
      continue;
    }
    const std::string tmp = dest.string() + ".part";
    const int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) return Status::invalid_argument(tmp + ": " + std::strerror(errno));
    auto copied = hash_range(fd, path, t.file_offset, t.bytes, out, tmp);
    ::close(out);
    if (!copied.is_ok() || copied.value() != hash.value()) {
      ::unlink(tmp.c_str());
      return copied.is_ok() ? Status::internal(path + ": tensor " + t.name + " changed while seeding")
                            : copied.status();
    }
    if (::rename(tmp.c_str(), dest.c_str()) != 0) return Status::internal(dest.string() + ": " + std::strerror(errno));
    ++r.tensors_written;
    r.bytes_written += t.bytes;
  }
  return r;
}

Result<std::vector<std::string>> model_cache_names(const std::string& model) {
  auto info = plan::read_model_info(model);
  if (!info.is_ok()) return info.status();
  auto files = open_all(info.value());
  if (!files.is_ok()) return files.status();
  std::vector<std::string> names;
  for (const auto& t : info->tensors) {
    if (t.bytes <= kSeedThreshold) continue;
    auto hash = hash_range(files->fds[t.split], info->files[t.split], t.file_offset, t.bytes, -1);
    if (!hash.is_ok()) return hash.status();
    names.push_back(hash_name(hash.value()));
  }
  return names;
}

Result<CacheStats> prune_cache(const std::string& dir, const std::vector<std::string>& models) {
  std::set<std::string> keep;
  for (const auto& m : models) {
    auto names = model_cache_names(m);
    if (!names.is_ok()) return names.status();
    keep.insert(names->begin(), names->end());
  }
  auto entries = list_cache(dir);
  if (!entries.is_ok()) return entries.status();
  CacheStats removed;
  for (const auto& e : entries.value()) {
    if (keep.count(e.name) != 0) continue;
    std::error_code ec;
    if (fs::remove(fs::path(dir) / e.name, ec)) {
      ++removed.entries;
      removed.bytes += e.bytes;
    }
  }
  return removed;
}

}  // namespace tandem::worker
