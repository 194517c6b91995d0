#include "engine/request.h"

#include <cmath>
#include <limits>
#include <optional>

#include "common.h"
#include "llama.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "…" : s;
}

std::string range_text(double lo, double hi) {
  auto num = [](double x) {
    if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<long long>(x));
    std::string s = std::to_string(x);
    while (s.back() == '0') s.pop_back();
    return s;
  };
  return "[" + num(lo) + ", " + num(hi) + "]";
}

// Reads an optional number field into `out`; absent or null keeps the default.
Status number_field(const json& body, const char* name, double lo, double hi, float* out) {
  if (!body.contains(name) || body[name].is_null()) return Status::ok();
  const json& v = body[name];
  if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi)) {
    return Status::invalid_argument(std::string(name) + " must be a number in " + range_text(lo, hi) + ", got " +
                                    shown(v));
  }
  *out = v.get<float>();
  return Status::ok();
}

Status integer_field(const json& body, const char* name, int64_t lo, int64_t hi, int64_t* out) {
  if (!body.contains(name) || body[name].is_null()) return Status::ok();
  const json& v = body[name];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return Status::invalid_argument(std::string(name) + " must be an integer in " +
                                    range_text(static_cast<double>(lo), static_cast<double>(hi)) + ", got " + shown(v));
  }
  *out = v.get<int64_t>();
  return Status::ok();
}

Status parse_sampling(const json& body, const llama_vocab* vocab, int n_ctx, common_params_sampling& s) {
  TANDEM_RETURN_IF_ERROR(number_field(body, "temperature", 0, 2, &s.temp));
  TANDEM_RETURN_IF_ERROR(number_field(body, "top_p", 0, 1, &s.top_p));
  TANDEM_RETURN_IF_ERROR(number_field(body, "min_p", 0, 1, &s.min_p));
  TANDEM_RETURN_IF_ERROR(number_field(body, "presence_penalty", -2, 2, &s.penalty_present));
  TANDEM_RETURN_IF_ERROR(number_field(body, "frequency_penalty", -2, 2, &s.penalty_freq));
  TANDEM_RETURN_IF_ERROR(number_field(body, "repetition_penalty", 0.01, 10, &s.penalty_repeat));
  TANDEM_RETURN_IF_ERROR(number_field(body, "repeat_penalty", 0.01, 10, &s.penalty_repeat));
  const int n_vocab = llama_vocab_n_tokens(vocab);
  int64_t v = s.top_k;
  TANDEM_RETURN_IF_ERROR(integer_field(body, "top_k", 0, n_vocab, &v));
  s.top_k = static_cast<int32_t>(v);
  v = s.penalty_last_n;
  TANDEM_RETURN_IF_ERROR(integer_field(body, "repeat_last_n", -1, n_ctx, &v));
  s.penalty_last_n = static_cast<int32_t>(v == -1 ? n_ctx : v);
  v = -1;
  TANDEM_RETURN_IF_ERROR(integer_field(body, "seed", 0, std::numeric_limits<uint32_t>::max() - 1, &v));
  s.seed = v < 0 ? LLAMA_DEFAULT_SEED : static_cast<uint32_t>(v);  // LLAMA_DEFAULT_SEED: a random one
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
    const json& lb = body["logit_bias"];
    if (!lb.is_object())
      return Status::invalid_argument("logit_bias must be an object mapping token ids to numbers in [-100, 100]");
    for (const auto& [key, bias] : lb.items()) {
      char* end = nullptr;
      const long token = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || token < 0 || token >= n_vocab) {
        return Status::invalid_argument("logit_bias: '" + key + "' is not a token id in [0, " +
                                        std::to_string(n_vocab - 1) + "]");
      }
      if (!bias.is_number() || bias.get<double>() < -100 || bias.get<double>() > 100) {
        return Status::invalid_argument("logit_bias[" + key + "] must be a number in [-100, 100], got " + shown(bias));
      }
      s.logit_bias.push_back({static_cast<llama_token>(token), bias.get<float>()});
    }
  }
  s.no_perf = true;
  return Status::ok();
}

Status parse_limits(const json& body, int n_ctx, Job& job) {
  int64_t max_tokens = -1;
  for (const char* name : {"max_tokens", "max_completion_tokens"})
    TANDEM_RETURN_IF_ERROR(integer_field(body, name, 1, 1 << 30, &max_tokens));
  TANDEM_RETURN_IF_ERROR(integer_field(body, "n_predict", -1, 1 << 30, &max_tokens));
  job.max_tokens = max_tokens <= 0 ? n_ctx : static_cast<int>(std::min<int64_t>(max_tokens, n_ctx));
  if (body.contains("return_tokens")) {
    if (!body["return_tokens"].is_boolean()) return Status::invalid_argument("return_tokens must be true or false");
    job.return_tokens = body["return_tokens"].get<bool>();
  }
  int64_t n = 1;
  TANDEM_RETURN_IF_ERROR(integer_field(body, "n", 1, 1, &n));
  // llama-server's name; 0 turns speculation off for this request.
  int64_t draft_max = -1;
  TANDEM_RETURN_IF_ERROR(integer_field(body, "speculative.n_max", 0, 32, &draft_max));
  job.draft_max = static_cast<int>(draft_max);
  // logprobs: true (chat) or the number of alternatives (completions); top_logprobs: that number.
  if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    const json& lp = body["logprobs"];
    if (lp.is_boolean()) {
      if (lp.get<bool>()) job.n_probs = 0;
    } else if (lp.is_number_integer() && lp.get<int64_t>() >= 0 && lp.get<int64_t>() <= kMaxTopLogprobs) {
      job.n_probs = lp.get<int>();
    } else {
      return Status::invalid_argument("logprobs must be true/false or an integer in [0, " +
                                      std::to_string(kMaxTopLogprobs) + "], got " + shown(lp));
    }
  }
  int64_t top = -1;
  TANDEM_RETURN_IF_ERROR(integer_field(body, "top_logprobs", 0, kMaxTopLogprobs, &top));
  if (top >= 0) {
    if (job.n_probs < 0) return Status::invalid_argument("top_logprobs needs logprobs: true");
    job.n_probs = static_cast<int>(top);
  }
  if (body.contains("ignore_eos")) {
    if (!body["ignore_eos"].is_boolean()) return Status::invalid_argument("ignore_eos must be true or false");
    job.ignore_eos = body["ignore_eos"].get<bool>();
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& stop = body["stop"];
    const json list = stop.is_string() ? json::array({stop}) : stop;
    if (!list.is_array() || list.size() > 16)
      return Status::invalid_argument("stop must be a string or an array of at most 16 strings");
    for (const json& s : list) {
      if (!s.is_string() || s.get<std::string>().empty())
        return Status::invalid_argument("stop: every entry must be a non-empty string");
      job.stops.push_back(s.get<std::string>());
    }
  }
  return Status::ok();
}

// A prompt given as token ids (OpenAI allows an array of integers, or one such array in an array):
// those ids, checked against the vocabulary; nullopt for a text prompt.
Result<std::optional<std::vector<llama_token>>> token_prompt(const json& body, const llama_vocab* vocab) {
  const json* p = &body["prompt"];
  if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) p = &(*p)[0];
  if (!p->is_array()) return std::optional<std::vector<llama_token>>();
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> ids;
  for (const json& t : *p) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
      return Status::invalid_argument("prompt: a token id must be an integer in [0, " + std::to_string(n_vocab - 1) +
                                      "], got " + shown(t));
    }
    ids.push_back(static_cast<llama_token>(t.get<int64_t>()));
  }
  return std::optional<std::vector<llama_token>>(std::move(ids));
}

Result<std::string> completion_prompt(const json& body, common_params_sampling& s) {
  const bool text = body.contains("prompt") && (body["prompt"].is_string() || body["prompt"].is_array());
  if (!text) return Status::invalid_argument("prompt must be a string or an array of token ids");
  auto schema = response_schema(body);
  if (!schema.is_ok()) return schema.status();
  if (!schema->grammar.empty()) {
    s.grammar = {COMMON_GRAMMAR_TYPE_OUTPUT_FORMAT, schema->grammar};
  } else if (body.contains("grammar") && !body["grammar"].is_null()) {
    if (!body["grammar"].is_string()) return Status::invalid_argument("grammar must be a string (GBNF)");
    if (!body["grammar"].get<std::string>().empty())
      s.grammar = {COMMON_GRAMMAR_TYPE_USER, body["grammar"].get<std::string>()};
  }
  return body["prompt"].is_string() ? body["prompt"].get<std::string>() : std::string();
}

// Carries the chat format's constraints into sampling, as llama-server does.
Status apply_chat_params(const ChatPrompt& chat, const llama_vocab* vocab, Job& job, common_params_sampling& s) {
  if (!chat.params.grammar.empty()) s.grammar = {COMMON_GRAMMAR_TYPE_TOOL_CALLS, chat.params.grammar};
  s.grammar_lazy = chat.params.grammar_lazy;
  s.generation_prompt = chat.params.generation_prompt;
  for (const std::string& t : chat.params.preserved_tokens) {
    const auto ids = common_tokenize(vocab, t, false, true);
    if (ids.size() == 1) s.preserved_tokens.insert(ids[0]);
  }
  for (const auto& trigger : chat.params.grammar_triggers) {
    if (trigger.type != COMMON_GRAMMAR_TRIGGER_TYPE_WORD) {
      s.grammar_triggers.push_back(trigger);
      continue;
    }
    const auto ids = common_tokenize(vocab, trigger.value, false, true);
    if (ids.size() == 1 && s.preserved_tokens.count(ids[0])) {
      s.grammar_triggers.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN, trigger.value, ids[0]});
    } else {
      s.grammar_triggers.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_WORD, trigger.value});
    }
  }
  if (s.grammar_lazy && s.grammar_triggers.empty())
    return Status::internal("the chat format asked for a lazy grammar without triggers");
  for (const auto& stop : chat.params.additional_stops) job.stops.push_back(stop);
  // Where the generation prompt opens a reasoning block, the grammar wants its end before a call:
  // the grammar alone then guides the model.
  const std::string& open = chat.params.thinking_start_tag;
  const std::string& gen = chat.params.generation_prompt;
  const bool reasoning_open =
      !open.empty() && gen.size() >= open.size() && gen.compare(gen.size() - open.size(), open.size(), open) == 0;
  if (chat.call_required && !reasoning_open) {
    // The formats' grammars let any text come before the required call (llama-server's too),
    // which a model may write until max_tokens. The answer opens with the call's opener instead:
    // the grammar's trigger, fed through the grammar like sampled tokens.
    for (const auto& trigger : s.grammar_triggers) {
      if (trigger.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN) {
        job.forced = {trigger.token};
        break;
      }
      if (trigger.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD) {
        job.forced = common_tokenize(vocab, trigger.value, false, true);
        break;
      }
    }
  }
  job.shown_special = s.preserved_tokens;
  job.chat.emplace(chat.parser);
  return Status::ok();
}

Status build_sampler(const llama_model* model, common_params_sampling& s, Job& job) {
  try {
    job.sampler.reset(common_sampler_init(model, s));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.find("grammar") != std::string::npos) {
      const char* field =
          s.grammar.type == COMMON_GRAMMAR_TYPE_USER ? "grammar" : "the grammar of the response format or tools";
      return Status::invalid_argument(std::string(field) + " does not parse");
    }
    // common rethrows some failures as a bare std::exception; its log has the details.
    // That is how common reports a grammar that rejects the generation prompt (the template's
    // text after the last message), which is fed through the grammar token by token: a
    // tokenizer that splits that text into pieces the grammar's characters cannot follow (an
    // SPM vocabulary's "▁" word marks, say) makes response_format and tools unusable.
    if (what == "std::exception") {
      return Status::invalid_argument(
          "this model's tokenizer cannot express the chat template's generation prompt in tokens that the grammar of "
          "the response "
          "format or tools accepts, so response_format, json_schema and tools cannot be used with this model (a "
          "byte-level BPE "
          "vocabulary can; a synthetic model: `tandem synth --vocab ggml-vocab-qwen2.gguf`)");
    }
    return Status::invalid_argument("sampling parameters: " + what);
  }
  if (!job.sampler) return Status::invalid_argument("the sampling parameters were refused");
  return Status::ok();
}

// Renders and tokenizes the prompt into job.prompt, carrying the chat format's constraints into
// `job` and `s`.
Status render_prompt(RequestKind kind, const json& body, const ModelFacts& facts, Job& job, common_params_sampling& s,
                     std::string* text = nullptr) {
  const llama_vocab* vocab = llama_model_get_vocab(facts.model);
  std::string prompt;
  if (kind == RequestKind::chat) {
    auto chat = facts.chat->render(body);
    if (!chat.is_ok()) return chat.status();
    TANDEM_RETURN_IF_ERROR(apply_chat_params(chat.value(), vocab, job, s));
    prompt = chat->prompt;
  } else {
    auto p = completion_prompt(body, s);
    if (!p.is_ok()) return p.status();
    auto ids = token_prompt(body, vocab);
    if (!ids.is_ok()) return ids.status();
    if (ids->has_value()) {
      job.prompt = std::move(*ids.value());
      return Status::ok();
    }
    prompt = p.value();
  }
  job.prompt = common_tokenize(vocab, prompt, /*add_special=*/true, /*parse_special=*/true);
  if (text != nullptr) *text = std::move(prompt);
  return Status::ok();
}

}  // namespace

Result<RenderedPrompt> render_prompt_only(RequestKind kind, const json& body, const ModelFacts& facts) {
  if (!body.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  Job job;
  common_params_sampling s;
  RenderedPrompt out;
  try {
    TANDEM_RETURN_IF_ERROR(render_prompt(kind, body, facts, job, s, &out.text));
  } catch (const std::exception& e) {
    return Status::invalid_argument(std::string("malformed request: ") + e.what());
  }
  out.tokens = static_cast<int>(job.prompt.size());
  return out;
}

Result<std::unique_ptr<Job>> prepare_job(RequestKind kind, const json& body, const ModelFacts& facts) {
  if (!body.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  const llama_vocab* vocab = llama_model_get_vocab(facts.model);
  auto job = std::make_unique<Job>();
  common_params_sampling s;
  try {
    TANDEM_RETURN_IF_ERROR(parse_sampling(body, vocab, facts.n_ctx_slot, s));
    TANDEM_RETURN_IF_ERROR(parse_limits(body, facts.n_ctx_slot, *job));
    TANDEM_RETURN_IF_ERROR(render_prompt(kind, body, facts, *job, s));
  } catch (const std::exception& e) {
    // nlohmann throws on a field of the wrong type read with value(); report it, never crash.
    return Status::invalid_argument(std::string("malformed request: ") + e.what());
  }
  if (job->prompt.empty()) return Status::invalid_argument("the prompt is empty");
  const int n_prompt = static_cast<int>(job->prompt.size());
  if (n_prompt >= facts.n_ctx_slot) {
    return Status::invalid_argument(std::string(kPromptTooLong) + std::to_string(n_prompt) +
                                    " tokens, but the context holds " + std::to_string(facts.n_ctx_slot) +
                                    " tokens per request (the prompt and at least one generated token)");
  }
  job->max_tokens = std::min(job->max_tokens, facts.n_ctx_slot - n_prompt);
  TANDEM_RETURN_IF_ERROR(build_sampler(facts.model, s, *job));
  // Penalties count the prompt too, as in llama-server.
  for (llama_token t : job->prompt) common_sampler_accept(job->sampler.get(), t, false);
  return job;
}

}  // namespace tandem::engine
