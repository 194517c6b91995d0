#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "config/config.h"
#include "gateway/keys.h"

namespace tandem::cli {
namespace {

// --db, else the config's [server] keys_db, else the default of the shipped units.
std::string database(const std::string& db, const std::string& config_path) {
  if (!db.empty()) return db;
  if (config_path.empty()) return "/var/lib/tandem/keys.db";
  auto c = config::load_config(config_path);
  if (!c.is_ok()) fail(c.status().message(), 2);
  if (c->server.keys_db.empty()) fail(config_path + ": [server] keys_db is not set (or pass --db)", 2);
  return c->server.keys_db;
}

std::unique_ptr<gateway::KeyStore> open_store(const std::string& path) {
  auto store = gateway::KeyStore::open(path);
  if (!store.is_ok()) fail(store.status().message());
  return std::move(store.value());
}

std::string date(int64_t t) {
  if (t == 0) return "-";
  char buf[32];
  const std::time_t tt = static_cast<std::time_t>(t);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::gmtime(&tt));
  return buf;
}

void register_keys(CLI::App& app) {
  auto* keys = app.add_subcommand("keys", "Manage the API keys of `tandem serve` (stored hashed in SQLite)");
  keys->require_subcommand(1);
  // The options of `keys` are taken after its subcommand too: `tandem keys list --db X`.
  keys->fallthrough();
  static std::string db, config_path;
  keys->add_option("--db", db, "Key database ([server] keys_db of tandem.toml; default /var/lib/tandem/keys.db)");
  keys->add_option("-c,--config", config_path, "tandem.toml: the key database is its [server] keys_db");

  auto* create = keys->add_subcommand("create", "Create a key and print it (it is shown only this once)");
  static std::string name;
  static gateway::KeyLimits limits;
  create->add_option("--name", name, "A name for the key: who or what uses it")->required();
  create->add_option("--rpm", limits.rpm, "Requests per minute (0: unlimited)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  create->add_option("--concurrency", limits.concurrency, "Requests in flight at once (0: unlimited)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  create->callback([] {
    auto k = open_store(database(db, config_path))->create(name, limits);
    if (!k.is_ok()) fail(k.status().message());
    std::printf("%s\n", k->secret.c_str());
    std::fprintf(stderr, "key '%s' (id %s) created; store it now: it cannot be shown again\n", name.c_str(),
                 k->record.id.c_str());
  });

  auto* list = keys->add_subcommand("list", "List keys with their limits and usage (never the keys themselves)");
  list->callback([] {
    auto all = open_store(database(db, config_path))->list();
    if (!all.is_ok()) fail(all.status().message());
    std::printf("%-10s %-20s %-8s %6s %6s %10s %12s %12s  %-16s %s\n", "ID", "NAME", "STATE", "RPM", "CONC", "REQUESTS",
                "PROMPT TOK", "COMPL TOK", "CREATED", "REVOKED");
    for (const auto& k : all.value()) {
      std::printf("%-10s %-20s %-8s %6d %6d %10llu %12llu %12llu  %-16s %s\n", k.id.c_str(), k.name.c_str(),
                  k.revoked_at ? "revoked" : "active", k.limits.rpm, k.limits.concurrency,
                  static_cast<unsigned long long>(k.requests), static_cast<unsigned long long>(k.prompt_tokens),
                  static_cast<unsigned long long>(k.completion_tokens), date(k.created_at).c_str(),
                  date(k.revoked_at).c_str());
    }
  });

  auto* revoke = keys->add_subcommand("revoke", "Revoke a key by name or id; it stops working at once");
  static std::string which;
  revoke->add_option("KEY", which, "Name or id of the key")->required();
  revoke->callback([] {
    Status s = open_store(database(db, config_path))->revoke(which);
    if (!s.is_ok()) fail(s.message());
    std::fprintf(stderr, "key '%s' revoked\n", which.c_str());
  });
}

}  // namespace

TANDEM_COMMAND(70, register_keys);

}  // namespace tandem::cli
