#include "engine/launch.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "common/strings.h"
#include "common/units.h"

namespace tandem::engine {
namespace {

using Kind = LaunchFlag::Kind;
using Values = std::vector<std::string>;

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& x : items) s += (s.empty() ? "" : ",") + x;
  return s;
}

Status read_int(const std::string& text, int& out, const char* flag) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end)
    return Status::invalid_argument(std::string(flag) + ": '" + text + "' is not an integer");
  out = v;
  return Status::ok();
}

// The shortest text that reads back as `x` (the launch's round trip through its command line).
std::string number_text(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

Status read_bytes(const std::string& text, uint64_t& out, const char* flag) {
  auto b = parse_bytes(text);
  if (!b.is_ok()) return Status::invalid_argument(std::string(flag) + ": " + b.status().message());
  out = b.value();
  return Status::ok();
}

}  // namespace

Status check_speculation_mode(const std::string& mode) {
  if (mode == "off" || mode == "ngram" || mode == "draft") return Status::ok();
  return Status::invalid_argument("speculative decoding '" + mode + "': expected off, ngram or draft");
}

namespace {

// The writers leave a flag out where the engine's default is meant, except those the gateway has
// always written (the socket, the model, the context, the slots, the CPU layers, the prompt cache).
const std::vector<LaunchFlag> kFlags = {
    {"--socket", Kind::value, "Serve the engine protocol on this Unix socket (docs/engine-protocol.md)",
     [](const EngineLaunch& l) { return l.socket_path.empty() ? Values{} : Values{l.socket_path}; },
     [](EngineLaunch& l, const std::string& v) {
       l.socket_path = v;
       return Status::ok();
     }},
    {"-m,--model", Kind::value, "GGUF model file",
     [](const EngineLaunch& l) { return l.model.empty() ? Values{} : Values{l.model}; },
     [](EngineLaunch& l, const std::string& v) {
       l.model = v;
       return Status::ok();
     }},
    {"-c,--context", Kind::value, "Context size in tokens (--socket: per parallel slot)",
     [](const EngineLaunch& l) { return Values{std::to_string(l.context)}; },
     [](EngineLaunch& l, const std::string& v) { return read_int(v, l.context, "--context"); }},
    {"--kv-type", Kind::value, "--socket: the KV cache's type, keys and values (f16, q8_0, ...; default f16)",
     [](const EngineLaunch& l) { return l.kv_type == "f16" ? Values{} : Values{l.kv_type}; },
     [](EngineLaunch& l, const std::string& v) {
       l.kv_type = v;
       return Status::ok();
     }},
    {"--parallel", Kind::value, "--socket: requests decoded at the same time (slots)",
     [](const EngineLaunch& l) { return Values{std::to_string(l.parallel)}; },
     [](EngineLaunch& l, const std::string& v) { return read_int(v, l.parallel, "--parallel"); }},
    {"--cpu-layers", Kind::value, "Number of leading layers kept on the host CPU",
     [](const EngineLaunch& l) { return Values{std::to_string(l.cpu_layers)}; },
     [](EngineLaunch& l, const std::string& v) { return read_int(v, l.cpu_layers, "--cpu-layers"); }},
    {"--rpc", Kind::value, "Comma-separated ggml RPC servers (host:port) to offload layers to",
     [](const EngineLaunch& l) { return l.rpc.empty() ? Values{} : Values{join(l.rpc)}; },
     [](EngineLaunch& l, const std::string& v) {
       l.rpc = split_commas(v);
       return Status::ok();
     }},
    // Every forwarder of `tandem serve` reaches a tandem worker whose link protocol matched: it
    // takes the engine's input-reuse markers (datapath/input_reuse.h).
    {"--tandem-worker", Kind::repeated,
     "HOST:PORT (repeatable): this --rpc endpoint reaches a tandem worker of this build (through `tandem link "
     "forward`), so a step's inputs that repeat across layers cross the link once; never a stock ggml RPC server "
     "(implied by --worker-cache)",
     [](const EngineLaunch& l) { return l.tandem_workers; },
     [](EngineLaunch& l, const std::string& v) {
       l.tandem_workers.push_back(v);
       return Status::ok();
     }},
    {"--layer-split", Kind::value,
     "Comma-separated layer counts per offload device (local GPUs, then RPC devices; see --workers-first)",
     [](const EngineLaunch& l) {
       Values counts;
       for (int n : l.device_layers) counts.push_back(std::to_string(n));
       return counts.empty() ? Values{} : Values{join(counts)};
     },
     [](EngineLaunch& l, const std::string& v) {
       l.device_layers.clear();
       for (const std::string& n : split_commas(v)) {
         int count = 0;
         if (!read_int(n, count, "--layer-split").is_ok())
           return Status::invalid_argument("--layer-split: '" + n + "' is not a layer count");
         l.device_layers.push_back(count);
       }
       return Status::ok();
     }},
    {"--workers-first", Kind::toggle,
     "Order the offload devices as llama.cpp does: RPC devices first, local GPUs last (the first layers run on the "
     "workers; the output head stays on the last local GPU without a tensor override, so pipeline parallelism stays "
     "on)",
     [](const EngineLaunch& l) { return l.workers_first ? Values{""} : Values{}; },
     [](EngineLaunch& l, const std::string&) {
       l.workers_first = true;
       return Status::ok();
     }},
    {"--split-mode", Kind::value,
     "layer: each device runs its range of layers in turn (tandem's split); tensor: every device runs every layer "
     "at once through llama.cpp's meta device (its -sm tensor; for measurement, on the architectures it splits; "
     "--layer-split gives the shares); ffn-tensor: every device runs every layer at once with only the FFNs and the "
     "output head split across them, attention and KV cache whole on each (the FFN tensor split, "
     "docs/parallelism.md)",
     [](const EngineLaunch& l) { return l.split_mode == "layer" ? Values{} : Values{l.split_mode}; },
     [](EngineLaunch& l, const std::string& v) {
       if (v != "layer" && v != "tensor" && v != "ffn-tensor")
         return Status::invalid_argument("--split-mode: '" + v + "' is not one of layer, tensor, ffn-tensor");
       l.split_mode = v;
       return Status::ok();
     }},
    {"-t,--threads", Kind::value, "CPU threads (0: one per physical core)",
     [](const EngineLaunch& l) { return l.threads == 0 ? Values{} : Values{std::to_string(l.threads)}; },
     [](EngineLaunch& l, const std::string& v) { return read_int(v, l.threads, "--threads"); }},
    {"--no-cuda-graphs", Kind::toggle, "Turn CUDA graphs off in the engine (GGML_CUDA_DISABLE_GRAPHS=1)",
     [](const EngineLaunch& l) { return l.cuda_graphs ? Values{} : Values{""}; },
     [](EngineLaunch& l, const std::string&) {
       l.cuda_graphs = false;
       return Status::ok();
     }},
    {"--no-mmap", Kind::toggle,
     "Read the model file rather than map it, as libllama does when a device cannot map files (an integrated "
     "GPU); the weights a --worker-cache lists are not read on the head either way",
     [](const EngineLaunch& l) { return l.mmap ? Values{} : Values{""}; },
     [](EngineLaunch& l, const std::string&) {
       l.mmap = false;
       return Status::ok();
     }},
    {"--prompt-cache", Kind::value,
     "--socket: memory for the prompt cache on each node (e.g. 8GiB; 0: off): a slot's state is saved when it "
     "idles or is taken over, and restored for a later request sharing a longer prefix with it; a --tandem-worker "
     "keeps its part of each state in its own memory",
     [](const EngineLaunch& l) { return Values{std::to_string(l.prompt_cache_bytes)}; },
     [](EngineLaunch& l, const std::string& v) { return read_bytes(v, l.prompt_cache_bytes, "--prompt-cache"); }},
    {"--prompt-cache-dir", Kind::value,
     "--socket: a folder for the prompt cache's states that memory no longer holds (emptied at start; a "
     "--tandem-worker spills its part into its own cache folder)",
     [](const EngineLaunch& l) { return l.prompt_cache_dir.empty() ? Values{} : Values{l.prompt_cache_dir}; },
     [](EngineLaunch& l, const std::string& v) {
       l.prompt_cache_dir = v;
       return Status::ok();
     }},
    // Written with the folder (as the gateway always has), or alone when not the default.
    {"--prompt-cache-dir-size", Kind::value, "--socket: bound of that folder on each node (e.g. 64GiB)",
     [](const EngineLaunch& l) {
       const bool written =
           !l.prompt_cache_dir.empty() || l.prompt_cache_dir_bytes != EngineLaunch().prompt_cache_dir_bytes;
       return written ? Values{std::to_string(l.prompt_cache_dir_bytes)} : Values{};
     },
     [](EngineLaunch& l, const std::string& v) {
       return read_bytes(v, l.prompt_cache_dir_bytes, "--prompt-cache-dir-size");
     }},
    {"--worker-cache", Kind::repeated,
     "HOST:PORT=FILE: the tandem worker behind this RPC endpoint has the weights FILE lists cached (\"HASH BYTES\" "
     "lines; `tandem serve` writes it); load them from there (repeatable)",
     [](const EngineLaunch& l) {
       Values out;
       for (const WorkerCacheListing& w : l.worker_caches) out.push_back(w.endpoint + "=" + w.file);
       return out;
     },
     [](EngineLaunch& l, const std::string& v) {
       const size_t eq = v.find('=');
       if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
         return Status::invalid_argument("--worker-cache: expected HOST:PORT=FILE, got '" + v + "'");
       l.worker_caches.push_back({v.substr(0, eq), v.substr(eq + 1)});
       return Status::ok();
     }},
    {"--speculative", Kind::value,
     "--socket: speculative decoding: off (default), ngram (drafts from each sequence's own tokens) or draft (drafts "
     "from "
     "--draft-model, on this process's first GPU or its CPU)",
     [](const EngineLaunch& l) { return l.speculative == "off" ? Values{} : Values{l.speculative}; },
     [](EngineLaunch& l, const std::string& v) {
       TANDEM_RETURN_IF_ERROR(check_speculation_mode(v));
       l.speculative = v;
       return Status::ok();
     }},
    {"--draft-model", Kind::value,
     "--socket: the draft's GGUF for --speculative draft: a small model of this model's vocabulary, or an EAGLE3 draft "
     "for it",
     [](const EngineLaunch& l) { return l.draft_model.empty() ? Values{} : Values{l.draft_model}; },
     [](EngineLaunch& l, const std::string& v) {
       l.draft_model = v;
       return Status::ok();
     }},
    {"--draft-max", Kind::value, "--socket: tokens drafted per step at most (1-32, default 8)",
     [](const EngineLaunch& l) { return l.draft_max == 8 ? Values{} : Values{std::to_string(l.draft_max)}; },
     [](EngineLaunch& l, const std::string& v) {
       int n = 0;
       TANDEM_RETURN_IF_ERROR(read_int(v, n, "--draft-max"));
       if (n < 1 || n > 32) return Status::invalid_argument("--draft-max: " + v + " is not in [1, 32]");
       l.draft_max = n;
       return Status::ok();
     }},
    {"--spec-synth-len", Kind::value,
     "--socket: benchmarks only: keep drafted tokens at random so that a step yields L tokens on average "
     "(llama.cpp's synthetic acceptance)",
     [](const EngineLaunch& l) { return l.spec_synth_len == 0 ? Values{} : Values{number_text(l.spec_synth_len)}; },
     [](EngineLaunch& l, const std::string& v) {
       char* end = nullptr;
       const double x = std::strtod(v.c_str(), &end);
       if (v.empty() || *end != '\0' || !(x >= 1 && x <= 33))
         return Status::invalid_argument("--spec-synth-len: '" + v + "' is not a number in [1, 33]");
       l.spec_synth_len = x;
       return Status::ok();
     }},
    {"--log-format", Kind::value, "Log lines as readable text (default) or one JSON object per line",
     [](const EngineLaunch& l) { return l.json_logs ? Values{"json"} : Values{}; },
     [](EngineLaunch& l, const std::string& v) {
       if (v != "text" && v != "json")
         return Status::invalid_argument("--log-format: '" + v + "' is not one of text, json");
       l.json_logs = v == "json";
       return Status::ok();
     }},
};

bool names_include(const LaunchFlag& flag, std::string_view name) {
  for (const std::string& n : split_commas(flag.names)) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

std::string LaunchFlag::written_name() const {
  const std::string_view all(names);
  return std::string(all.substr(0, all.find(',')));
}

const std::vector<LaunchFlag>& launch_flags() { return kFlags; }

std::vector<std::string> launch_args(const EngineLaunch& launch) {
  std::vector<std::string> args;
  for (const LaunchFlag& flag : kFlags) {
    for (const std::string& v : flag.write(launch)) {
      args.push_back(flag.written_name());
      if (flag.kind != LaunchFlag::Kind::toggle) args.push_back(v);
    }
  }
  args.insert(args.end(), launch.extra.begin(), launch.extra.end());
  return args;
}

Result<EngineLaunch> parse_launch_args(const std::vector<std::string>& args) {
  EngineLaunch launch;
  std::vector<std::string> seen;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.rfind("--", 0) == 0 && eq != std::string::npos ? arg.substr(0, eq) : arg;
    const auto flag =
        std::find_if(kFlags.begin(), kFlags.end(), [&](const LaunchFlag& f) { return names_include(f, name); });
    if (flag == kFlags.end()) break;
    const std::string written = flag->written_name();
    if (flag->kind == LaunchFlag::Kind::value) {
      if (std::find(seen.begin(), seen.end(), written) != seen.end())
        return Status::invalid_argument(written + " given twice");
      seen.push_back(written);
    }
    std::string value;
    if (name != arg) {
      if (flag->kind == LaunchFlag::Kind::toggle) return Status::invalid_argument(name + " takes no value");
      value = arg.substr(eq + 1);
    } else if (flag->kind != LaunchFlag::Kind::toggle) {
      if (i + 1 == args.size()) return Status::invalid_argument(name + " needs a value");
      value = args[++i];
    }
    TANDEM_RETURN_IF_ERROR(flag->read(launch, value));
  }
  launch.extra.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  TANDEM_RETURN_IF_ERROR(validate_launch(launch));
  return launch;
}

Status validate_launch(const EngineLaunch& launch) {
  for (const std::string& w : launch.tandem_workers) {
    if (std::find(launch.rpc.begin(), launch.rpc.end(), w) == launch.rpc.end()) {
      return Status::invalid_argument("--tandem-worker: '" + w + "' is not one of the --rpc endpoints (" +
                                      join(launch.rpc) + ")");
    }
  }
  return Status::ok();
}

}  // namespace tandem::engine
