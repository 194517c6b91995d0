#include "config/config.h"

#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <toml++/toml.h>

#include "common/units.h"

namespace tandem::config {
namespace {

// Reads the keys of one table, each through its own handler; a key without a handler is an error.
class TableReader {
 public:
  using Handler = std::function<Status(const toml::node&)>;

  TableReader(std::string source, std::string table) : source_(std::move(source)), table_(std::move(table)) {}

  void on(const std::string& key, Handler h) { handlers_[key] = std::move(h); }

  Status read(const toml::table& t) const {
    for (const auto& [key, node] : t) {
      const std::string k(key.str());
      auto it = handlers_.find(k);
      if (it == handlers_.end()) return error(node, k, "unknown key" + known());
      if (Status s = it->second(node); !s.is_ok()) return error(node, k, s.message());
    }
    return Status::ok();
  }

  Status error(const toml::node& node, const std::string& key, const std::string& what) const {
    return Status::invalid_argument(source_ + ":" + std::to_string(node.source().begin.line) + ": " + table_ + " " + key + ": " + what);
  }

 private:
  std::string known() const {
    std::string names;
    for (const auto& [k, h] : handlers_) names += (names.empty() ? " (known: " : ", ") + k;
    return names.empty() ? "" : names + ")";
  }

  std::string source_, table_;
  std::map<std::string, Handler> handlers_;
};

TableReader::Handler string_into(std::string* out) {
  return [out](const toml::node& n) {
    if (!n.is_string()) return Status::invalid_argument("expected a string");
    *out = n.as_string()->get();
    return Status::ok();
  };
}

TableReader::Handler count_into(uint32_t* out, int64_t min, int64_t max) {
  return [out, min, max](const toml::node& n) {
    if (!n.is_integer()) return Status::invalid_argument("expected an integer");
    const int64_t v = n.as_integer()->get();
    if (v < min || v > max) {
      return Status::invalid_argument("must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " + std::to_string(v));
    }
    *out = static_cast<uint32_t>(v);
    return Status::ok();
  };
}

// A size: a string with a unit ("128GiB", "96 GB") or a plain integer of bytes.
TableReader::Handler bytes_into(std::optional<uint64_t>* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_integer() && n.as_integer()->get() >= 0) {
      *out = static_cast<uint64_t>(n.as_integer()->get());
      return Status::ok();
    }
    if (!n.is_string()) return Status::invalid_argument("expected a size such as \"128GiB\"");
    auto b = parse_bytes(n.as_string()->get());
    if (!b.is_ok()) return b.status();
    *out = b.value();
    return Status::ok();
  };
}

// A bandwidth: "273GB/s", "1.2TB/s" (bytes per second).
TableReader::Handler bandwidth_into(std::optional<double>* out) {
  return [out](const toml::node& n) -> Status {
    if (!n.is_string()) return Status::invalid_argument("expected a bandwidth such as \"273GB/s\"");
    std::string t = n.as_string()->get();
    if (t.size() > 2 && (t.substr(t.size() - 2) == "/s" || t.substr(t.size() - 2) == "/S")) t.resize(t.size() - 2);
    auto b = parse_bytes(t);
    if (!b.is_ok() || b.value() == 0) return Status::invalid_argument("'" + n.as_string()->get() + "' is not a bandwidth (e.g. 273GB/s)");
    *out = static_cast<double>(b.value());
    return Status::ok();
  };
}

TableReader::Handler bool_into(bool* out) {
  return [out](const toml::node& n) -> Status {
    if (!n.is_boolean()) return Status::invalid_argument("expected true or false");
    *out = n.as_boolean()->get();
    return Status::ok();
  };
}

TableReader::Handler number_into(double* out, double min, double max) {
  return [out, min, max](const toml::node& n) -> Status {
    double v = 0;
    if (n.is_floating_point()) v = n.as_floating_point()->get();
    else if (n.is_integer()) v = static_cast<double>(n.as_integer()->get());
    else return Status::invalid_argument("expected a number");
    if (!(v >= min && v <= max)) {
      return Status::invalid_argument("must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    *out = v;
    return Status::ok();
  };
}

Status read_cluster(const std::string& src, const toml::table& t, ClusterConfig* c) {
  TableReader r(src, "[cluster]");
  r.on("secret_file", string_into(&c->secret_file));
  r.on("head_name", string_into(&c->head_name));
  r.on("head_memory", bytes_into(&c->head_memory));
  r.on("head_bandwidth", bandwidth_into(&c->head_bandwidth));
  r.on("head_device", [c](const toml::node& n) -> Status {
    if (!n.is_string() || (n.as_string()->get() != "gpu" && n.as_string()->get() != "cpu")) {
      return Status::invalid_argument("expected \"gpu\" or \"cpu\"");
    }
    c->head_device = n.as_string()->get();
    return Status::ok();
  });
  return r.read(t);
}

Status read_worker(const std::string& src, const toml::table& t, WorkerConfig* w) {
  w->line = static_cast<int>(t.source().begin.line);
  TableReader r(src, "[[worker]]");
  r.on("name", string_into(&w->name));
  r.on("address", string_into(&w->address));
  r.on("memory", bytes_into(&w->memory));
  r.on("bandwidth", bandwidth_into(&w->bandwidth));
  r.on("listen", string_into(&w->listen));
  r.on("cache_dir", string_into(&w->cache_dir));
  r.on("cache_max_size", bytes_into(&w->cache_max_size));
  TANDEM_RETURN_IF_ERROR(r.read(t));
  const std::string at = src + ":" + std::to_string(w->line) + ": [[worker]]";
  if (w->name.empty()) return Status::invalid_argument(at + " name: missing");
  if (w->address.empty()) return Status::invalid_argument(at + " '" + w->name + "' address: missing (host:port)");
  return Status::ok();
}

Status read_model(const std::string& src, const toml::table& t, ModelConfig* m) {
  TableReader r(src, "[model]");
  r.on("path", string_into(&m->path));
  r.on("context", count_into(&m->context, 1, 16777216));
  r.on("parallel", count_into(&m->parallel, 1, 256));
  r.on("kv_type", string_into(&m->kv_type));
  return r.read(t);
}

Status read_server(const std::string& src, const toml::table& t, ServerConfig* s) {
  TableReader r(src, "[server]");
  r.on("listen", string_into(&s->listen));
  r.on("keys_db", string_into(&s->keys_db));
  r.on("status_page_public", bool_into(&s->status_page_public));
  return r.read(t);
}

Status read_plan(const std::string& src, const toml::table& t, PlanConfig* p) {
  TableReader r(src, "[plan]");
  r.on("margin", number_into(&p->margin, 0, 0.99));
  r.on("margin_bytes", [p](const toml::node& n) -> Status {
    std::optional<uint64_t> v;
    TANDEM_RETURN_IF_ERROR(bytes_into(&v)(n));
    p->margin_bytes = *v;
    return Status::ok();
  });
  r.on("hop_ms", number_into(&p->hop_ms, 0, 1e6));
  return r.read(t);
}

Status read_root(const std::string& src, const toml::table& root, Config* c) {
  TableReader r(src, "top level:");
  auto table = [&](const toml::node& n, const std::function<Status(const toml::table&)>& f) -> Status {
    if (!n.is_table()) return Status::invalid_argument("expected a table");
    return f(*n.as_table());
  };
  // The sub-readers' messages already carry the line and key; pass them through unchanged.
  Status inner = Status::ok();
  auto keep = [&inner](Status s) {
    if (!s.is_ok()) inner = s;
    return s.is_ok() ? Status::ok() : Status::invalid_argument("");
  };
  r.on("cluster", [&](const toml::node& n) { return keep(table(n, [&](const toml::table& t) { return read_cluster(src, t, &c->cluster); })); });
  r.on("model", [&](const toml::node& n) { return keep(table(n, [&](const toml::table& t) { return read_model(src, t, &c->model); })); });
  r.on("server", [&](const toml::node& n) { return keep(table(n, [&](const toml::table& t) { return read_server(src, t, &c->server); })); });
  r.on("plan", [&](const toml::node& n) { return keep(table(n, [&](const toml::table& t) { return read_plan(src, t, &c->plan); })); });
  r.on("worker", [&](const toml::node& n) -> Status {
    if (!n.is_array_of_tables()) return Status::invalid_argument("expected [[worker]] tables");
    for (const toml::node& w : *n.as_array()) {
      WorkerConfig wc;
      if (Status s = read_worker(src, *w.as_table(), &wc); !s.is_ok()) return keep(s);
      for (const WorkerConfig& other : c->workers) {
        if (other.name == wc.name) {
          return keep(Status::invalid_argument(src + ":" + std::to_string(wc.line) + ": [[worker]] name: '" + wc.name +
                                               "' is used twice (first on line " + std::to_string(other.line) + ")"));
        }
      }
      c->workers.push_back(wc);
    }
    return Status::ok();
  });
  Status s = r.read(root);
  if (!inner.is_ok()) return inner;
  return s;
}

}  // namespace

Result<Config> parse_config(const std::string& text, const std::string& source) {
  Config c;
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Status::invalid_argument(source + ":" + std::to_string(e.source().begin.line) + ":" +
                                    std::to_string(e.source().begin.column) + ": " + std::string(e.description()));
  }
  TANDEM_RETURN_IF_ERROR(read_root(source, root, &c));
  return c;
}

Result<Config> load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path + ": cannot open the config file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::invalid_argument(path + ": cannot read the config file");
  auto c = parse_config(text.str(), path);
  if (c.is_ok()) c->path = path;
  return c;
}

}  // namespace tandem::config
