// API keys: created once and shown once, stored only as SHA-256 hashes in SQLite, with per-key
// limits and token usage.
//
// A key looks like "tdm_<8 hex id>_<48 hex secret>". The id finds the row; the whole key's hash is
// compared in constant time. Keys carry 216 random bits, so a fast hash is enough: there is
// nothing to brute-force that a slow hash would protect.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

struct sqlite3;

namespace tandem::gateway {

struct KeyLimits {
  int rpm = 0;          // requests per minute; 0 = unlimited
  int concurrency = 0;  // requests in flight at once; 0 = unlimited
};

struct KeyRecord {
  std::string id;  // the 8 hex digits after "tdm_": safe to log and show
  std::string name;
  KeyLimits limits;
  int64_t created_at = 0;  // unix seconds
  int64_t revoked_at = 0;  // 0 while active
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
};

struct NewKey {
  KeyRecord record;
  std::string secret;  // the full key; shown to the user once, never stored
};

// A key store backed by one SQLite file. Thread-safe: one connection, guarded by a mutex.
class KeyStore {
 public:
  // Opens (creating when missing, with mode 0600) the database at `path`; ":memory:" for tests.
  static Result<std::unique_ptr<KeyStore>> open(const std::string& path);
  ~KeyStore();

  // Creates a key named `name` (unique among active keys: letters, digits, '-', '_', '.').
  Result<NewKey> create(const std::string& name, KeyLimits limits);
  // All keys, active and revoked, oldest first.
  Result<std::vector<KeyRecord>> list();
  // Revokes the active key whose name or id is `name_or_id`; not_found when there is none.
  Status revoke(const std::string& name_or_id);
  // The active key that `presented` is, or an error: invalid_argument for a malformed key,
  // not_found for an unknown or revoked one. The comparison runs in constant time.
  Result<KeyRecord> authenticate(const std::string& presented);
  // Adds one request's usage to the key's totals.
  Status record_usage(const std::string& id, uint64_t prompt_tokens, uint64_t completion_tokens);

 private:
  explicit KeyStore(sqlite3* db) : db_(db) {}
  std::mutex mutex_;
  sqlite3* db_;  // guarded by mutex_
};

}  // namespace tandem::gateway
