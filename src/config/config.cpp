#include "config/config.h"

#include <toml++/toml.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "common/units.h"

namespace tandem::config {
namespace {

// Reads the keys of one table, each through its own handler; a key without a handler is an error.
class TableReader {
 public:
  using Handler = std::function<Status(const toml::node&)>;

  TableReader(std::string source, std::string table) : source_(std::move(source)), table_(std::move(table)) {}

  void on(const std::string& key, Handler h) {
    if (handlers_.emplace(key, std::move(h)).second) order_.push_back(key);
  }
  // "[table] key" for each key, in the order they were added.
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const std::string& k : order_) out.push_back(table_ + " " + k);
    return out;
  }

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
    return Status::invalid_argument(source_ + ":" + std::to_string(node.source().begin.line) + ": " + table_ + " " +
                                    key + ": " + what);
  }

 private:
  std::string known() const {
    std::string names;
    for (const auto& [k, h] : handlers_) names += (names.empty() ? " (known: " : ", ") + k;
    return names.empty() ? "" : names + ")";
  }

  std::string source_, table_;
  std::map<std::string, Handler> handlers_;
  std::vector<std::string> order_;
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
      return Status::invalid_argument("must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                                      std::to_string(v));
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
    auto b = parse_bytes(n.as_string()->get(), /*require_unit=*/true);
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
    auto b = parse_bytes(t, /*require_unit=*/true);
    if (!b.is_ok() || b.value() == 0)
      return Status::invalid_argument("'" + n.as_string()->get() + "' is not a bandwidth (e.g. 273GB/s)");
    *out = static_cast<double>(b.value());
    return Status::ok();
  };
}

TableReader::Handler int_into(int* out, int min, int max) {
  return [out, min, max](const toml::node& n) {
    if (!n.is_integer()) return Status::invalid_argument("expected an integer");
    const int64_t v = n.as_integer()->get();
    if (v < min || v > max) {
      return Status::invalid_argument("must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                                      std::to_string(v));
    }
    *out = static_cast<int>(v);
    return Status::ok();
  };
}

TableReader::Handler one_of_into(std::string* out, std::vector<std::string> allowed) {
  return [out, allowed](const toml::node& n) -> Status {
    std::string names;
    for (const std::string& a : allowed) names += (names.empty() ? "\"" : ", \"") + a + "\"";
    if (!n.is_string()) return Status::invalid_argument("expected one of " + names);
    for (const std::string& a : allowed) {
      if (n.as_string()->get() == a) {
        *out = a;
        return Status::ok();
      }
    }
    return Status::invalid_argument("expected one of " + names + ", got \"" + n.as_string()->get() + "\"");
  };
}

TableReader::Handler strings_into(std::vector<std::string>* out) {
  return [out](const toml::node& n) -> Status {
    if (!n.is_array()) return Status::invalid_argument("expected an array of strings");
    out->clear();
    for (const toml::node& e : *n.as_array()) {
      if (!e.is_string()) return Status::invalid_argument("expected an array of strings");
      out->push_back(e.as_string()->get());
    }
    return Status::ok();
  };
}

// A hand split: "1,2,1", "-,0-1,2-3", or an array of counts and range strings.
TableReader::Handler layers_into(std::vector<LayerShare>* out) {
  return [out](const toml::node& n) -> Status {
    std::string text;
    if (n.is_string()) {
      text = n.as_string()->get();
    } else if (n.is_array()) {
      for (const toml::node& e : *n.as_array()) {
        std::string part;
        if (e.is_integer())
          part = std::to_string(e.as_integer()->get());
        else if (e.is_string())
          part = e.as_string()->get();
        else
          return Status::invalid_argument("expected layer counts or ranges such as \"0-29\"");
        text += (text.empty() ? "" : ",") + part;
      }
    } else {
      return Status::invalid_argument("expected layer counts or ranges, e.g. [30, 32] or \"0-29,30-61\"");
    }
    auto l = parse_layers(text);
    if (!l.is_ok()) return l.status();
    *out = l.value();
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
    if (n.is_floating_point())
      v = n.as_floating_point()->get();
    else if (n.is_integer())
      v = static_cast<double>(n.as_integer()->get());
    else
      return Status::invalid_argument("expected a number");
    if (!(v >= min && v <= max)) {
      return Status::invalid_argument("must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    *out = v;
    return Status::ok();
  };
}

TableReader cluster_reader(const std::string& src, ClusterConfig* c) {
  TableReader r(src, "[cluster]");
  r.on("secret_file", string_into(&c->secret_file));
  r.on("head_name", string_into(&c->head_name));
  r.on("head_memory", bytes_into(&c->head_memory));
  r.on("head_bandwidth", bandwidth_into(&c->head_bandwidth));
  r.on("head_device", one_of_into(&c->head_device, {"gpu", "cpu", "unified"}));
  r.on("backtraces", bool_into(&c->backtraces));
  return r;
}

TableReader worker_reader(const std::string& src, WorkerConfig* w) {
  TableReader r(src, "[[worker]]");
  r.on("name", string_into(&w->name));
  r.on("address", string_into(&w->address));
  r.on("memory", bytes_into(&w->memory));
  r.on("bandwidth", bandwidth_into(&w->bandwidth));
  r.on("unified_memory", bool_into(&w->unified_memory));
  r.on("listen", string_into(&w->listen));
  r.on("cache_dir", string_into(&w->cache_dir));
  r.on("cache_max_size", bytes_into(&w->cache_max_size));
  r.on("devices", strings_into(&w->devices));
  r.on("threads", int_into(&w->threads, 0, 4096));
  r.on("cuda_graphs", bool_into(&w->cuda_graphs));
  r.on("private_netns", bool_into(&w->private_netns));
  r.on("log_format", one_of_into(&w->log_format, {"text", "json"}));
  return r;
}

TableReader model_reader(const std::string& src, ModelConfig* m) {
  TableReader r(src, "[model]");
  r.on("path", string_into(&m->path));
  r.on("context", count_into(&m->context, 1, 16777216));
  r.on("parallel", count_into(&m->parallel, 1, 256));
  r.on("kv_type", string_into(&m->kv_type));
  r.on("layers", layers_into(&m->layers));
  r.on("parallelism", one_of_into(&m->parallelism, {"layer", "ffn-tensor"}));
  r.on("threads", int_into(&m->threads, 0, 4096));
  r.on("cuda_graphs", bool_into(&m->cuda_graphs));
  r.on("mmap", bool_into(&m->mmap));
  r.on("engine_flags", strings_into(&m->engine_flags));
  r.on("prompt_cache", [m](const toml::node& n) -> Status {
    // 0 turns it off, with or without a unit.
    if (n.is_string() && n.as_string()->get() == "0") {
      m->prompt_cache = 0;
      return Status::ok();
    }
    std::optional<uint64_t> v;
    TANDEM_RETURN_IF_ERROR(bytes_into(&v)(n));
    m->prompt_cache = *v;
    return Status::ok();
  });
  r.on("prompt_cache_dir", string_into(&m->prompt_cache_dir));
  r.on("speculative", one_of_into(&m->speculative, {"off", "ngram", "draft"}));
  r.on("draft_model", string_into(&m->draft_model));
  r.on("draft_max", int_into(&m->draft_max, 1, 32));
  r.on("spec_synth_len", number_into(&m->spec_synth_len, 0, 33));
  r.on("prompt_cache_dir_size", [m](const toml::node& n) -> Status {
    std::optional<uint64_t> v;
    TANDEM_RETURN_IF_ERROR(bytes_into(&v)(n));
    m->prompt_cache_dir_size = *v;
    return Status::ok();
  });
  return r;
}

TableReader server_reader(const std::string& src, ServerConfig* s) {
  TableReader r(src, "[server]");
  r.on("listen", string_into(&s->listen));
  r.on("keys_db", string_into(&s->keys_db));
  r.on("status_page_public", bool_into(&s->status_page_public));
  r.on("model_id", string_into(&s->model_id));
  r.on("insecure_no_auth", bool_into(&s->insecure_no_auth));
  r.on("max_in_flight", int_into(&s->max_in_flight, 1, 100000));
  r.on("max_tokens", int_into(&s->max_tokens, 0, 1 << 30));
  r.on("canary_interval", int_into(&s->canary_interval_s, 1, 86400));
  r.on("drain_timeout", int_into(&s->drain_timeout_s, 0, 3600));
  r.on("log_format", one_of_into(&s->log_format, {"text", "json"}));
  r.on("cors_origins", strings_into(&s->cors_origins));
  return r;
}

TableReader plan_reader(const std::string& src, PlanConfig* p) {
  TableReader r(src, "[plan]");
  r.on("margin", number_into(&p->margin, 0, 0.99));
  r.on("margin_bytes", [p](const toml::node& n) -> Status {
    std::optional<uint64_t> v;
    TANDEM_RETURN_IF_ERROR(bytes_into(&v)(n));
    p->margin_bytes = *v;
    return Status::ok();
  });
  r.on("hop_ms", number_into(&p->hop_ms, 0, 1e6));
  r.on("exchange_ms", number_into(&p->exchange_ms, 0, 1e6));
  r.on("os_reserve", [p](const toml::node& n) -> Status {
    std::optional<uint64_t> v;
    TANDEM_RETURN_IF_ERROR(bytes_into(&v)(n));
    p->os_reserve = *v;
    return Status::ok();
  });
  r.on("load_reserve", [p](const toml::node& n) -> Status {
    std::optional<uint64_t> v;
    TANDEM_RETURN_IF_ERROR(bytes_into(&v)(n));
    p->load_reserve = *v;
    return Status::ok();
  });
  return r;
}

Status read_worker(const std::string& src, const toml::table& t, WorkerConfig* w) {
  w->line = static_cast<int>(t.source().begin.line);
  TANDEM_RETURN_IF_ERROR(worker_reader(src, w).read(t));
  const std::string at = src + ":" + std::to_string(w->line) + ": [[worker]]";
  if (w->name.empty()) return Status::invalid_argument(at + " name: missing");
  if (w->address.empty()) return Status::invalid_argument(at + " '" + w->name + "' address: missing (host:port)");
  return Status::ok();
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
  r.on("cluster", [&](const toml::node& n) {
    return keep(table(n, [&](const toml::table& t) { return cluster_reader(src, &c->cluster).read(t); }));
  });
  r.on("model", [&](const toml::node& n) {
    return keep(table(n, [&](const toml::table& t) { return model_reader(src, &c->model).read(t); }));
  });
  r.on("server", [&](const toml::node& n) {
    return keep(table(n, [&](const toml::table& t) { return server_reader(src, &c->server).read(t); }));
  });
  r.on("plan", [&](const toml::node& n) {
    return keep(table(n, [&](const toml::table& t) { return plan_reader(src, &c->plan).read(t); }));
  });
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
        // Two entries for one listener would make the head hold two sessions with one worker.
        if (other.address == wc.address) {
          return keep(Status::invalid_argument(src + ":" + std::to_string(wc.line) + ": [[worker]] address: '" +
                                               wc.address + "' of '" + wc.name + "' is also the address of '" +
                                               other.name + "' (line " + std::to_string(other.line) +
                                               "): one worker, one entry"));
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
  if (c.model.speculative == "draft" && c.model.draft_model.empty()) {
    return Status::invalid_argument(source + ": [model] speculative = \"draft\" needs draft_model (the draft's GGUF)");
  }
  return c;
}

Result<Config> load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path + ": cannot open the config file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::invalid_argument(path + ": cannot read the config file");
  auto c = parse_config(text.str(), path);
  if (!c.is_ok()) return c;
  c->path = path;
  const std::filesystem::path base = std::filesystem::absolute(path).parent_path();
  auto resolve = [&base](std::string* p) {
    if (!p->empty() && (*p)[0] != '/') *p = (base / *p).lexically_normal().string();
  };
  resolve(&c->cluster.secret_file);
  resolve(&c->model.path);
  resolve(&c->server.keys_db);
  resolve(&c->model.prompt_cache_dir);
  resolve(&c->model.draft_model);
  for (WorkerConfig& w : c->workers) resolve(&w.cache_dir);
  return c;
}

Result<const WorkerConfig*> find_worker(const Config& c, const std::string& name) {
  std::string names;
  for (const auto& w : c.workers) {
    if (w.name == name || (name.empty() && c.workers.size() == 1)) return &w;
    names += (names.empty() ? "" : ", ") + w.name;
  }
  const std::string source = c.path.empty() ? "the config" : c.path;
  if (c.workers.empty()) return Status::invalid_argument(source + " has no [[worker]] table");
  if (name.empty()) return Status::invalid_argument("which worker? " + source + " has " + names + ": give --name");
  return Status::not_found("no [[worker]] named '" + name + "' in " + source + " (it has: " + names + ")");
}

Result<std::string> worker_listen(const WorkerConfig& w) {
  if (!w.listen.empty()) return w.listen;
  const size_t colon = w.address.rfind(':');
  const std::string port = colon == std::string::npos ? "" : w.address.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::invalid_argument("[[worker]] '" + w.name + "' address '" + w.address + "': expected host:port");
  }
  return "0.0.0.0:" + port;
}

std::vector<std::string> known_keys() {
  Config c;
  WorkerConfig w;
  std::vector<std::string> out;
  for (const TableReader& r : {cluster_reader("", &c.cluster), worker_reader("", &w), model_reader("", &c.model),
                               server_reader("", &c.server), plan_reader("", &c.plan)}) {
    const auto keys = r.keys();
    out.insert(out.end(), keys.begin(), keys.end());
  }
  return out;
}

Result<std::vector<LayerShare>> parse_layers(const std::string& text) {
  std::vector<LayerShare> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    const std::string where = "layers '" + text + "': '" + part + "'";
    LayerShare share;
    int a = 0, b = 0, used = 0;
    if (part == "-") {
      share.count = 0;
      share.first = 0;  // a range, empty
    } else if (std::sscanf(part.c_str(), "%d-%d%n", &a, &b, &used) == 2 && used == static_cast<int>(part.size())) {
      if (a < 0 || b < a) return Status::invalid_argument(where + " is not a range A-B with 0 <= A <= B");
      share.first = a;
      share.count = b - a + 1;
    } else if (std::sscanf(part.c_str(), "%d%n", &a, &used) == 1 && used == static_cast<int>(part.size())) {
      if (a < 0) return Status::invalid_argument(where + ": a count must not be negative");
      share.count = a;
    } else {
      return Status::invalid_argument(
          where + " is neither a layer count, a range A-B nor '-' (one entry per node, head first)");
    }
    out.push_back(share);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string format_layers(const std::vector<LayerShare>& layers) {
  std::string s;
  for (const LayerShare& l : layers) {
    std::string part = l.first < 0    ? std::to_string(l.count)
                       : l.count == 0 ? "-"
                                      : std::to_string(l.first) + "-" + std::to_string(l.first + l.count - 1);
    s += (s.empty() ? "" : ",") + part;
  }
  return s;
}

}  // namespace tandem::config
