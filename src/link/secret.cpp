#include "link/secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tandem::link {

Secret::~Secret() {
  if (!key_.empty()) OPENSSL_cleanse(key_.data(), key_.size());
}

std::vector<uint8_t> Secret::hmac(const std::vector<uint8_t>& data) const {
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  // HMAC() with SHA-256 only fails on allocation failure, which is fatal anyway.
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), data.data(), data.size(), out.data(), &len);
  out.resize(len);
  return out;
}

bool constant_time_equal(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return false;  // lengths are public (fixed-width fields)
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::vector<uint8_t>> random_bytes(size_t n) {
  std::vector<uint8_t> out(n);
  if (RAND_bytes(out.data(), static_cast<int>(n)) != 1) {
    return Status::internal("OpenSSL's random generator failed");
  }
  return out;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<Secret> load_secret(const std::string& path) {
  const std::string ctx = "cluster secret " + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return Status::not_found(ctx + ": no such file (create one with `tandem secret new -o " + path +
                               "` and copy it to every node)");
    }
    return Status::invalid_argument(ctx + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::invalid_argument(ctx + ": not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::invalid_argument(ctx + ": readable or writable by other users (mode " + mode + "); run `chmod 600 " +
                                    path + "`");
  }
  std::ifstream in(path);
  if (!in) return Status::invalid_argument(ctx + ": cannot read: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  std::vector<uint8_t> key;
  int high = -1;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    const int v = hex_value(c);
    if (v < 0) {
      OPENSSL_cleanse(text.data(), text.size());
      return Status::invalid_argument(ctx + ": not hex digits (expected " + std::to_string(2 * kMinSecretBytes) +
                                      " or more, as `tandem secret new` writes)");
    }
    if (high < 0) {
      high = v;
    } else {
      key.push_back(static_cast<uint8_t>(high << 4 | v));
      high = -1;
    }
  }
  OPENSSL_cleanse(text.data(), text.size());
  if (key.empty() && high < 0) return Status::invalid_argument(ctx + ": empty");
  if (high >= 0) return Status::invalid_argument(ctx + ": an odd number of hex digits");
  if (key.size() < kMinSecretBytes) {
    const size_t n = key.size();
    OPENSSL_cleanse(key.data(), key.size());
    return Status::invalid_argument(ctx + ": too short: " + std::to_string(n) + " bytes, at least " +
                                    std::to_string(kMinSecretBytes) + " needed");
  }
  return Secret(std::move(key));
}

Status write_new_secret(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    return Status::invalid_argument(path +
                                    ": already exists; a new secret would lock out every node holding the old "
                                    "one (remove the file first if that is what you want)");
  }
  auto bytes = random_bytes(kMinSecretBytes);
  if (!bytes.is_ok()) return bytes.status();
  std::string hex;
  static const char* const digits = "0123456789abcdef";
  for (uint8_t b : bytes.value()) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  hex += '\n';
  OPENSSL_cleanse(bytes->data(), bytes->size());
  const std::string tmp = path + ".part";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::invalid_argument(tmp + ": cannot create: " + std::strerror(errno));
  const bool written = ::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  OPENSSL_cleanse(hex.data(), hex.size());
  if (!written) {
    ::unlink(tmp.c_str());
    return Status::internal(tmp + ": write failed: " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return Status::internal(path + ": cannot rename into place: " + std::strerror(e));
  }
  return Status::ok();
}

}  // namespace tandem::link
