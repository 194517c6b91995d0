#include "gateway/keys.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace tandem::gateway {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  hash BLOB NOT NULL,
  rpm INTEGER NOT NULL DEFAULT 0,
  concurrency INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  revoked_at INTEGER NOT NULL DEFAULT 0,
  requests INTEGER NOT NULL DEFAULT 0,
  prompt_tokens INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS api_keys_active_name ON api_keys(name) WHERE revoked_at = 0;
)sql";

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string sha256(const std::string& text) {
  unsigned char out[32];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), out, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(out), len);
}

// RAII for one prepared statement.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void blob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void i64(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  int step() { return sqlite3_step(s_); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

Status db_error(sqlite3* db, const std::string& what) {
  return Status::internal("key database: " + what + ": " + sqlite3_errmsg(db));
}

KeyRecord read_record(sqlite3_stmt* s) {
  KeyRecord r;
  r.id = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  r.name = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
  r.limits.rpm = sqlite3_column_int(s, 2);
  r.limits.concurrency = sqlite3_column_int(s, 3);
  r.created_at = sqlite3_column_int64(s, 4);
  r.revoked_at = sqlite3_column_int64(s, 5);
  r.requests = static_cast<uint64_t>(sqlite3_column_int64(s, 6));
  r.prompt_tokens = static_cast<uint64_t>(sqlite3_column_int64(s, 7));
  r.completion_tokens = static_cast<uint64_t>(sqlite3_column_int64(s, 8));
  return r;
}

constexpr const char* kColumns =
    "id, name, rpm, concurrency, created_at, revoked_at, requests, prompt_tokens, completion_tokens";

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<KeyStore>> KeyStore::open(const std::string& path) {
  if (path != ":memory:") {
    // Created here first so the file is never readable by others, not even for a moment.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status::invalid_argument("key database " + path + ": cannot open: " + std::strerror(errno));
    ::close(fd);
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::invalid_argument("key database " + path + ": " + why);
  }
  sqlite3_busy_timeout(db, 5000);
  char* err = nullptr;
  if (sqlite3_exec(db, kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : "unknown error";
    sqlite3_free(err);
    sqlite3_close(db);
    return Status::invalid_argument("key database " + path + ": not a tandem key database (" + why + ")");
  }
  return std::unique_ptr<KeyStore>(new KeyStore(db));
}

KeyStore::~KeyStore() { sqlite3_close(db_); }

Result<NewKey> KeyStore::create(const std::string& name, KeyLimits limits) {
  if (!valid_name(name))
    return Status::invalid_argument("key name '" + name + "': use 1-64 letters, digits, '-', '_' or '.'");
  if (limits.rpm < 0 || limits.concurrency < 0)
    return Status::invalid_argument("key limits must be 0 (unlimited) or positive");
  unsigned char raw[28];
  if (RAND_bytes(raw, sizeof raw) != 1) return Status::internal("no randomness available for a new key");
  NewKey k;
  k.record.id = hex(raw, 4);
  k.secret = "tdm_" + k.record.id + "_" + hex(raw + 4, 24);
  k.record.name = name;
  k.record.limits = limits;
  k.record.created_at = static_cast<int64_t>(std::time(nullptr));
  std::lock_guard<std::mutex> lock(mutex_);
  Stmt s(db_, "INSERT INTO api_keys (id, name, hash, rpm, concurrency, created_at) VALUES (?, ?, ?, ?, ?, ?)");
  if (!s.ok()) return db_error(db_, "insert");
  s.text(1, k.record.id);
  s.text(2, name);
  s.blob(3, sha256(k.secret));
  s.i64(4, limits.rpm);
  s.i64(5, limits.concurrency);
  s.i64(6, k.record.created_at);
  if (s.step() != SQLITE_DONE) {
    if (sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_UNIQUE) {
      return Status::invalid_argument("an active key named '" + name +
                                      "' exists already; revoke it or pick another name");
    }
    return db_error(db_, "insert");
  }
  return k;
}

Result<std::vector<KeyRecord>> KeyStore::list() {
  std::lock_guard<std::mutex> lock(mutex_);
  Stmt s(db_, (std::string("SELECT ") + kColumns + " FROM api_keys ORDER BY created_at, rowid").c_str());
  if (!s.ok()) return db_error(db_, "list");
  std::vector<KeyRecord> out;
  while (s.step() == SQLITE_ROW) out.push_back(read_record(s.get()));
  return out;
}

Status KeyStore::revoke(const std::string& name_or_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Stmt s(db_, "UPDATE api_keys SET revoked_at = ? WHERE revoked_at = 0 AND (name = ? OR id = ?)");
  if (!s.ok()) return db_error(db_, "revoke");
  s.i64(1, static_cast<int64_t>(std::time(nullptr)));
  s.text(2, name_or_id);
  s.text(3, name_or_id);
  if (s.step() != SQLITE_DONE) return db_error(db_, "revoke");
  if (sqlite3_changes(db_) == 0) return Status::not_found("no active key named or with id '" + name_or_id + "'");
  return Status::ok();
}

Result<KeyRecord> KeyStore::authenticate(const std::string& presented) {
  // tdm_ + 8 hex + _ + 48 hex
  if (presented.size() != 61 || presented.compare(0, 4, "tdm_") != 0 || presented[12] != '_') {
    return Status::invalid_argument(
        "malformed API key (expected tdm_<id>_<secret>, as printed by `tandem keys create`)");
  }
  const std::string id = presented.substr(4, 8);
  const std::string want = sha256(presented);
  std::lock_guard<std::mutex> lock(mutex_);
  Stmt s(db_, (std::string("SELECT ") + kColumns + ", hash FROM api_keys WHERE id = ? AND revoked_at = 0").c_str());
  if (!s.ok()) return db_error(db_, "lookup");
  s.text(1, id);
  if (s.step() != SQLITE_ROW) return Status::not_found("unknown or revoked API key");
  const void* hash = sqlite3_column_blob(s.get(), 9);
  const int n = sqlite3_column_bytes(s.get(), 9);
  if (n != 32 || CRYPTO_memcmp(hash, want.data(), 32) != 0) return Status::not_found("unknown or revoked API key");
  return read_record(s.get());
}

Status KeyStore::record_usage(const std::string& id, uint64_t prompt_tokens, uint64_t completion_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  Stmt s(db_,
         "UPDATE api_keys SET requests = requests + 1, prompt_tokens = prompt_tokens + ?, completion_tokens = "
         "completion_tokens + ? WHERE id = ?");
  if (!s.ok()) return db_error(db_, "usage");
  s.i64(1, static_cast<int64_t>(prompt_tokens));
  s.i64(2, static_cast<int64_t>(completion_tokens));
  s.text(3, id);
  if (s.step() != SQLITE_DONE) return db_error(db_, "usage");
  return Status::ok();
}

}  // namespace tandem::gateway
