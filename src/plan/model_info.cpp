#include "plan/model_info.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/units.h"
#include "ggml.h"
#include "gguf.h"
#include "plan/gguf_file.h"

namespace tandem::plan {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

WeightRole classify(const std::string& name, int layer) {
  if (starts_with(name, "token_embd.")) return WeightRole::embedding;
  if (starts_with(name, "output.") || starts_with(name, "output_norm.")) return WeightRole::output;
  if (layer < 0) return WeightRole::other;
  const std::string local = name.substr(name.find('.', 4) + 1);  // after "blk.N."
  if (starts_with(local, "attn_") || starts_with(local, "index")) return WeightRole::attention;
  if (contains(local, "_exps")) return WeightRole::routed_experts;
  if (contains(local, "_shexp")) return WeightRole::shared_experts;
  if (starts_with(local, "ffn_gate_inp") || starts_with(local, "exp_probs_b") ||
      starts_with(local, "ffn_exp_probs_b")) {
    return WeightRole::router;
  }
  if (starts_with(local, "ffn_gate.") || starts_with(local, "ffn_up.") || starts_with(local, "ffn_down.")) {
    return WeightRole::dense_ffn;
  }
  if (contains(local, "norm")) return WeightRole::norm;
  return WeightRole::other;
}

int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) == 1) return layer;
  return -1;
}

Result<uint64_t> file_size(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::not_found(path + ": no such file");
    return Status::invalid_argument(path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::invalid_argument(path + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

// "m-00001-of-00003.gguf" -> ("m", 1, 3); false when the name has no split suffix.
bool parse_split_name(const std::string& path, std::string* prefix, int* no, int* count) {
  const size_t n = path.size();
  const size_t suffix = std::strlen("-00001-of-00003.gguf");
  if (n < suffix) return false;
  if (std::sscanf(path.c_str() + n - suffix, "-%5d-of-%5d.gguf", no, count) != 2) return false;
  *prefix = path.substr(0, n - suffix);
  return true;
}

std::string split_path(const std::string& prefix, int no, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", no, count);
  return prefix + buf;
}

struct Hparams {
  const gguf_context* ctx;
  std::string arch;
  Status status;
  uint32_t get(const char* key, uint32_t fallback = 0) {
    auto v = gguf_get_uint(ctx, arch + "." + key, fallback);
    if (!v.is_ok()) {
      if (status.is_ok()) status = v.status();
      return fallback;
    }
    return static_cast<uint32_t>(std::min<uint64_t>(v.value(), UINT32_MAX));
  }
};

Status read_hparams(const gguf_context* ctx, ModelInfo* info) {
  info->arch = gguf_get_string(ctx, "general.architecture");
  if (info->arch.empty()) return Status::invalid_argument("no general.architecture key: not a model file");
  info->name = gguf_get_string(ctx, "general.name");
  info->header_only = gguf_get_flag(ctx, "tandem.header_only");
  info->has_chat_template = !gguf_get_string(ctx, "tokenizer.chat_template").empty();
  Hparams h{ctx, info->arch, Status::ok()};
  info->n_layer = h.get("block_count");
  info->n_embd = h.get("embedding_length");
  info->n_head = h.get("attention.head_count");
  info->n_head_kv = h.get("attention.head_count_kv", info->n_head);
  info->n_ctx_train = h.get("context_length");
  info->head_dim_k = h.get("attention.key_length", info->n_head ? info->n_embd / info->n_head : 0);
  info->head_dim_v = h.get("attention.value_length", info->head_dim_k);
  info->n_ff = h.get("feed_forward_length");
  info->n_ff_exp = h.get("expert_feed_forward_length");
  info->n_expert = h.get("expert_count");
  info->n_expert_used = h.get("expert_used_count");
  info->n_expert_shared = h.get("expert_shared_count");
  info->n_layer_dense_lead = h.get("leading_dense_block_count");
  info->indexer_n_head = h.get("attention.indexer.head_count");
  info->indexer_head_size = h.get("attention.indexer.key_length");
  info->target_hidden_size = h.get("target_hidden_size");
  if (const int64_t id = gguf_find_key(ctx, (info->arch + ".target_layers").c_str());
      id >= 0 && gguf_get_kv_type(ctx, id) == GGUF_TYPE_ARRAY) {
    info->n_target_layers = static_cast<uint32_t>(std::min<size_t>(gguf_get_arr_n(ctx, id), UINT32_MAX));
  }
  info->n_vocab = h.get("vocab_size");
  if (info->n_vocab == 0) {
    const int64_t id = gguf_find_key(ctx, "tokenizer.ggml.tokens");
    if (id >= 0 && gguf_get_kv_type(ctx, id) == GGUF_TYPE_ARRAY) info->n_vocab = gguf_get_arr_n(ctx, id);
  }
  TANDEM_RETURN_IF_ERROR(h.status);
  if (info->n_layer == 0) return Status::invalid_argument("key '" + info->arch + ".block_count' is missing or 0");
  return Status::ok();
}

Status read_tensors(const gguf_context* ctx, int split, const std::string& path, uint64_t size, bool header_only,
                    ModelInfo* info) {
  const uint64_t data_offset = gguf_get_data_offset(ctx);
  const int64_t n = gguf_get_n_tensors(ctx);
  uint64_t data_end = data_offset;
  for (int64_t i = 0; i < n; ++i) {
    TensorInfo t;
    t.name = gguf_get_tensor_name(ctx, i);
    t.type = gguf_get_tensor_type(ctx, i);
    const int64_t* ne = gguf_get_tensor_ne(ctx, i);
    // ggml's reader checks that the element count fits in int64 only after multiplying the
    // dimensions, and a product that wrapped to zero or below skips its check (found by fuzzing);
    // such a tensor would overflow every size computed from it here, so it is refused.
    int64_t elements = 1;
    for (int d = 0; d < 4; ++d) {
      t.ne[d] = ne[d];
      if (ne[d] < 0 || __builtin_mul_overflow(elements, ne[d], &elements)) {
        return Status::invalid_argument(path + ": tensor '" + t.name +
                                        "' has a shape whose element count does not fit in 64 bits (" +
                                        std::to_string(ne[0]) + " x " + std::to_string(ne[1]) + " x " +
                                        std::to_string(ne[2]) + " x " + std::to_string(ne[3]) + ")");
      }
    }
    t.bytes = gguf_get_tensor_size(ctx, i);
    t.layer = layer_of(t.name);
    t.split = split;
    t.file_offset = data_offset + gguf_get_tensor_offset(ctx, i);
    t.role = classify(t.name, t.layer);
    data_end = std::max<uint64_t>(data_end, t.file_offset + t.bytes);
    info->tensors.push_back(std::move(t));
  }
  if (!header_only && data_end > size) {
    return Status::invalid_argument(path + ": truncated: the tensor table needs " + std::to_string(data_end) +
                                    " bytes (" + format_bytes(data_end) + "), the file has " + std::to_string(size) +
                                    " (" + format_bytes(size) + ")");
  }
  return Status::ok();
}

}  // namespace

uint64_t tensor_read_bytes(const ModelInfo& info, const TensorInfo& t, uint64_t bytes) {
  // One embedding row, the used share of the routed experts, everything else in full.
  if (t.role == WeightRole::embedding && t.ne[1] > 0) return bytes / t.ne[1];
  if (t.role == WeightRole::routed_experts && t.ne[2] > 0 && info.n_expert_used > 0) {
    return bytes / t.ne[2] * std::min<uint64_t>(info.n_expert_used, t.ne[2]);
  }
  return bytes;
}

namespace {

void compute_totals(ModelInfo* info) {
  std::map<int, uint64_t> bytes_by_type;
  for (const TensorInfo& t : info->tensors) {
    info->tensor_bytes += t.bytes;
    info->n_params += t.n_elements();
    if (t.ne[1] > 1) bytes_by_type[t.type] += t.bytes;
    const uint64_t read = tensor_read_bytes(*info, t, t.bytes);
    uint64_t params = t.n_elements();
    if (t.role == WeightRole::embedding && t.ne[1] > 0) {
      params = t.ne[0];
    } else if (t.role == WeightRole::routed_experts && t.ne[2] > 0 && info->n_expert_used > 0) {
      params = t.n_elements() / t.ne[2] * std::min<uint64_t>(info->n_expert_used, t.ne[2]);
    }
    info->active_params += params;
    ActiveBytes& a = info->active;
    switch (t.role) {
      case WeightRole::embedding:
        a.embedding += read;
        break;
      case WeightRole::attention:
        a.attention += read;
        break;
      case WeightRole::routed_experts:
        a.routed_experts += read;
        break;
      case WeightRole::shared_experts:
        a.shared_experts += read;
        break;
      case WeightRole::dense_ffn:
        a.dense_ffn += read;
        break;
      case WeightRole::router:
        a.router += read;
        break;
      case WeightRole::norm:
        a.norm += read;
        break;
      case WeightRole::output:
        a.output += read;
        break;
      case WeightRole::other:
        a.other += read;
        break;
    }
  }
  uint64_t best = 0;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > best) {
      best = bytes;
      info->file_type = ggml_type_name(static_cast<ggml_type>(type));
    }
  }
}

}  // namespace

const char* weight_role_name(WeightRole role) {
  switch (role) {
    case WeightRole::embedding:
      return "embedding";
    case WeightRole::attention:
      return "attention";
    case WeightRole::routed_experts:
      return "routed_experts";
    case WeightRole::shared_experts:
      return "shared_experts";
    case WeightRole::dense_ffn:
      return "dense_ffn";
    case WeightRole::router:
      return "router";
    case WeightRole::norm:
      return "norm";
    case WeightRole::output:
      return "output";
    case WeightRole::other:
      return "other";
  }
  return "other";
}

Result<ModelInfo> read_model_info(const std::string& path) {
  ModelInfo info;
  auto size = file_size(path);
  if (!size.is_ok()) return size.status();
  auto first = open_gguf_header(path);
  if (!first.is_ok()) return first.status();
  const gguf_context* ctx = first.value().get();

  auto split_count = gguf_get_uint(ctx, "split.count", 1);
  auto split_no = gguf_get_uint(ctx, "split.no", 0);
  if (!split_count.is_ok()) return split_count.status().with_context(path);
  if (!split_no.is_ok()) return split_no.status().with_context(path);
  const int count = static_cast<int>(std::max<uint64_t>(1, split_count.value()));
  if (count > 1 && split_no.value() != 0) {
    return Status::invalid_argument(path + ": this is split " + std::to_string(split_no.value() + 1) + " of " +
                                    std::to_string(count) + "; pass the first split (-00001-of-" +
                                    std::to_string(count) + ")");
  }
  if (Status s = read_hparams(ctx, &info); !s.is_ok()) return s.with_context(path);
  std::string prefix;
  int no = 0, name_count = 0;
  if (count > 1 && !parse_split_name(path, &prefix, &no, &name_count)) {
    return Status::invalid_argument(path + ": the header says the model is split in " + std::to_string(count) +
                                    " files, but the name does not end in -00001-of-" + std::to_string(count) +
                                    ".gguf, so the other splits cannot be found");
  }

  info.files.push_back(path);
  info.file_sizes.push_back(size.value());
  TANDEM_RETURN_IF_ERROR(read_tensors(ctx, 0, path, size.value(), info.header_only, &info));
  for (int i = 1; i < count; ++i) {
    const std::string part = split_path(prefix, i + 1, count);
    auto part_size = file_size(part);
    if (!part_size.is_ok()) {
      return Status::not_found(path + ": split " + std::to_string(i + 1) + " of " + std::to_string(count) +
                               " is missing (" + part + ")");
    }
    auto g = open_gguf_header(part);
    if (!g.is_ok()) return g.status();
    auto no_i = gguf_get_uint(g.value().get(), "split.no", 0);
    if (!no_i.is_ok() || no_i.value() != static_cast<uint64_t>(i)) {
      return Status::invalid_argument(part + ": expected split.no = " + std::to_string(i) + " in this file");
    }
    info.files.push_back(part);
    info.file_sizes.push_back(part_size.value());
    TANDEM_RETURN_IF_ERROR(read_tensors(g.value().get(), i, part, part_size.value(), info.header_only, &info));
  }
  for (uint64_t s : info.file_sizes) info.file_bytes += s;
  if (info.tensors.empty()) return Status::invalid_argument(path + ": the file holds no tensors");
  compute_totals(&info);
  return info;
}

std::string format_model_info(const ModelInfo& info) {
  std::ostringstream out;
  char line[256];
  auto row = [&](const char* key, const std::string& value) {
    std::snprintf(line, sizeof line, "%-24s %s\n", key, value.c_str());
    out << line;
  };
  row("file",
      info.files.front() + (info.files.size() > 1 ? " (+" + std::to_string(info.files.size() - 1) + " splits)" : ""));
  if (info.header_only) row("data", "none: header-only file (tensor table of the real model)");
  row("architecture", info.arch + (info.name.empty() ? "" : " (" + info.name + ")"));
  row("layers", std::to_string(info.n_layer) +
                    (info.n_layer_dense_lead ? " (" + std::to_string(info.n_layer_dense_lead) + " dense)" : ""));
  row("embedding", std::to_string(info.n_embd));
  row("attention heads", std::to_string(info.n_head) + " query, " + std::to_string(info.n_head_kv) +
                             " key/value, head size " + std::to_string(info.head_dim_k));
  if (info.n_expert > 0) {
    row("experts", std::to_string(info.n_expert) + " routed, " + std::to_string(info.n_expert_used) + " used, " +
                       std::to_string(info.n_expert_shared) + " shared; expert FFN " + std::to_string(info.n_ff_exp));
  }
  row("vocabulary", std::to_string(info.n_vocab) + (info.has_chat_template ? " tokens, chat template" : " tokens"));
  row("context (trained)", std::to_string(info.n_ctx_train));
  row("tensors", std::to_string(info.tensors.size()) + ", mostly " + info.file_type);
  row("file bytes", std::to_string(info.file_bytes) + " (" + format_bytes(info.file_bytes) + ")");
  row("weight bytes", std::to_string(info.tensor_bytes) + " (" + format_bytes(info.tensor_bytes) + ")");
  row("parameters", format_count(static_cast<double>(info.n_params)) + " total, " +
                        format_count(static_cast<double>(info.active_params)) + " active per token");
  const ActiveBytes& a = info.active;
  row("read per token", std::to_string(a.total()) + " (" + format_bytes(a.total()) + ")");
  auto part = [&](const char* what, uint64_t v) {
    if (v) row((std::string("  ") + what).c_str(), format_bytes(v));
  };
  part("attention", a.attention);
  part("routed experts (used)", a.routed_experts);
  part("shared experts", a.shared_experts);
  part("dense FFN", a.dense_ffn);
  part("router", a.router);
  part("norms", a.norm);
  part("output", a.output);
  part("embedding row", a.embedding);
  part("other", a.other);
  return out.str();
}

std::string model_info_to_json(const ModelInfo& info, int indent) {
  nlohmann::ordered_json j;
  j["files"] = info.files;
  j["header_only"] = info.header_only;
  j["arch"] = info.arch;
  j["name"] = info.name;
  j["file_type"] = info.file_type;
  j["n_layer"] = info.n_layer;
  j["n_layer_dense_lead"] = info.n_layer_dense_lead;
  j["n_embd"] = info.n_embd;
  j["n_head"] = info.n_head;
  j["n_head_kv"] = info.n_head_kv;
  j["head_dim_k"] = info.head_dim_k;
  j["head_dim_v"] = info.head_dim_v;
  j["n_ff"] = info.n_ff;
  j["n_ff_exp"] = info.n_ff_exp;
  j["n_expert"] = info.n_expert;
  j["n_expert_used"] = info.n_expert_used;
  j["n_expert_shared"] = info.n_expert_shared;
  j["n_vocab"] = info.n_vocab;
  j["n_ctx_train"] = info.n_ctx_train;
  j["has_chat_template"] = info.has_chat_template;
  j["n_tensors"] = info.tensors.size();
  j["bytes"] = info.file_bytes;
  j["tensor_bytes"] = info.tensor_bytes;
  j["n_params"] = info.n_params;
  j["n_params_active"] = info.active_params;
  j["active_bytes_per_token"] = info.active.total();
  const ActiveBytes& a = info.active;
  j["active_bytes"] = {{"attention", a.attention},
                       {"routed_experts", a.routed_experts},
                       {"shared_experts", a.shared_experts},
                       {"dense_ffn", a.dense_ffn},
                       {"router", a.router},
                       {"norm", a.norm},
                       {"output", a.output},
                       {"embedding", a.embedding},
                       {"other", a.other}};
  return j.dump(indent);
}

}  // namespace tandem::plan
