// The cluster secret: the key that head and workers share to authenticate each other.
//
// A secret file holds at least 32 random bytes as hex (64 hex digits; `tandem secret new` writes
// exactly that plus a newline). It must be a regular file that no other user can read: a key that
// anyone on the box can read authenticates nobody.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::link {

constexpr size_t kMinSecretBytes = 32;

// The key bytes, wiped from memory on destruction. Copyable (each copy wipes its own bytes).
// Thread-safety: immutable after construction, so it may be shared read-only between threads.
class Secret {
 public:
  explicit Secret(std::vector<uint8_t> key) : key_(std::move(key)) {}
  ~Secret();
  Secret(const Secret&) = default;
  Secret& operator=(const Secret&) = default;

  // HMAC-SHA256 of `data` under the key: 32 bytes.
  std::vector<uint8_t> hmac(const std::vector<uint8_t>& data) const;

 private:
  std::vector<uint8_t> key_;
};

// Reads and checks a secret file. Errors name the file and say what is wrong and what to do:
// missing, not a regular file, readable or writable by group/others, empty, not hex, too short.
Result<Secret> load_secret(const std::string& path);

// Writes 32 fresh random bytes (OpenSSL's RAND_bytes) as 64 hex digits + newline to `path` with
// mode 0600. Refuses to overwrite an existing file (a new secret would lock out every node that
// holds the old one). The file appears whole or not at all (written beside it, then renamed).
Status write_new_secret(const std::string& path);

// Compares two byte strings in time that does not depend on where they differ.
bool constant_time_equal(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// Fills `n` bytes from OpenSSL's CSPRNG; an error only when the RNG itself fails.
Result<std::vector<uint8_t>> random_bytes(size_t n);

}  // namespace tandem::link
