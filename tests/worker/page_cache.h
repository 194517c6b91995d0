// What the page cache holds of a file, for the tests of what a load reads and leaves there.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace tandem::testing {

// False on a file system whose files are memory (tmpfs): its pages never leave, and nothing is
// read from a disk.
inline bool has_page_cache(const std::string& path) {
  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994;
  return ::statfs(path.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) != kTmpfsMagic;
}

inline size_t file_pages(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  return static_cast<size_t>((st.st_size + page - 1) / page);
}

// Bytes of [offset, offset + bytes) of `path` in the page cache, in whole pages (mincore over a
// mapping, which brings none in); bytes 0: to the end of the file.
inline uint64_t resident_bytes(const std::string& path, uint64_t offset = 0, uint64_t bytes = 0) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size == 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return 0;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t end = bytes == 0 ? size : std::min(size, offset + bytes);
  const uint64_t first = std::min(offset, end) / page * page;
  std::vector<unsigned char> in((end - first + page - 1) / page);
  uint64_t n = 0;
  if (!in.empty() && ::mincore(static_cast<uint8_t*>(p) + first, end - first, in.data()) == 0) {
    for (unsigned char c : in) n += c & 1;
  }
  ::munmap(p, size);
  return n * page;
}

// Pages of `path` in the page cache.
inline size_t resident_pages(const std::string& path) {
  return static_cast<size_t>(resident_bytes(path) / static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)));
}

// Writes `path`'s pages back to the disk, so that they can leave the page cache (dirty pages stay).
inline void write_back(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::close(fd);
}

// Written back and out of the page cache: the next read comes from the disk.
inline void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Reads the whole file, which leaves it in the page cache.
inline void read_through(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {}
}

// This process's bytes read from storage so far (/proc/self/io read_bytes: every thread, the page
// cache's misses, read-ahead included).
inline uint64_t storage_read_bytes() {
  std::ifstream in("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

}  // namespace tandem::testing
