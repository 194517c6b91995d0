// The engine's internal protocol (docs/engine-protocol.md): JSON lines over a Unix socket between
// the gateway (client) and `tandem engine` (server). This header is JSON-free on purpose: the
// gateway uses Debian's nlohmann-json, the engine llama.cpp's vendored copy, and the two never
// exchange JSON objects, only these structs and the encoded lines.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::engine {

inline constexpr int kProtocolVersion = 1;
// A line longer than this is refused (a request body with a long conversation fits easily).
inline constexpr size_t kMaxLineBytes = 64u << 20;

enum class RequestKind { chat, completion };

// An `invalid_argument` error whose message starts with this is a prompt longer than the context
// ("the prompt has 528 tokens, but the context holds 256 tokens per request ..."): the gateway
// reports it as OpenAI's `context_length_exceeded`.
inline constexpr std::string_view kPromptTooLong = "the prompt has ";
// Most alternatives per token a request may ask for (top_logprobs), as OpenAI allows.
inline constexpr int kMaxTopLogprobs = 20;

// Client → engine.
struct EngineRequest {
  // tokenize, detokenize and count are answered at once by one `result` event (or an error) and
  // use no slot: they read the loaded model's vocabulary and chat template only.
  enum class Op { submit, cancel, status, tokenize, detokenize, count };
  Op op = Op::status;
  std::string id;  // every op but status: the request id, unique among the client's active ones
  RequestKind kind = RequestKind::chat;
  std::string body;             // submit, count: the OpenAI request body, as serialized JSON (an object)
  std::string content;          // tokenize: the text
  bool add_special = false;     // tokenize: add the model's BOS/EOS as a prompt would have them
  bool parse_special = true;    // tokenize: read special-token texts ("<|im_start|>") as those tokens
  std::vector<int32_t> tokens;  // detokenize
};

struct ToolCallDelta {
  int index = 0;          // position of the call in the message's tool_calls
  std::string id;         // set on the first delta of a call
  std::string name;       // set on the first delta of a call
  std::string arguments;  // a piece of the JSON arguments text
};

// The probability of one token where it was sampled (the model's distribution before sampling,
// as llama-server reports it), and the most likely alternatives there.
struct TopLogprob {
  int32_t id = 0;
  std::string piece;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0;  // natural log
};
struct TokenLogprob {
  TopLogprob token;
  std::vector<TopLogprob> top;  // most likely first; as many as the request's top_logprobs
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV cache was reused from the slot or restored from the prompt cache
};

struct LoadProgress {
  double fraction = 0;  // 0..1
  uint64_t bytes = 0;   // weight bytes loaded so far (fraction × total)
  uint64_t total_bytes = 0;
  double rate = 0;  // bytes per second since loading began
};

// The prompt cache (engine/prompt_cache.h), as the engine reports it. Bytes are what is held
// now; the counts are since the engine started.
struct PromptCacheStats {
  uint64_t bytes = 0, max_bytes = 0;  // the head's part held now; the bound of each node (0: off)
  uint64_t worker_bytes = 0;          // the workers' parts held now, all workers together
  uint64_t entries = 0;
  uint64_t hits = 0, misses = 0;               // lookups that found a longer prefix than the slots hold, or not
  uint64_t evictions = 0;                      // states dropped to stay within the bounds
  uint64_t restored_tokens = 0;                // prompt tokens restored instead of evaluated
  uint64_t failed_restores = 0;                // states found that could not be restored (evaluated instead)
  uint64_t saves = 0;                          // states kept
  uint64_t saved_bytes = 0;                    // their whole size, the head's and the workers' parts
  uint64_t saved_worker_bytes = 0;             // of which the workers kept
  std::map<std::string, uint64_t> per_worker;  // a worker's RPC endpoint -> its parts held now
  // The disk tier ([model] prompt_cache_dir): what the head and the workers hold there now, the
  // bound on each node, and the states moved there since start.
  uint64_t disk_bytes = 0, max_disk_bytes = 0, worker_disk_bytes = 0, spills = 0;
  std::map<std::string, uint64_t> per_worker_disk;
};

// One row per counter of PromptCacheStats (the per-worker maps aside): its name on the wire, and
// how the gateway shows it in /health's prompt_cache and in /metrics. Encoding, decoding, /health
// and the metric families all walk this table, so a new counter is one row.
struct PromptCacheField {
  std::string_view name;  // in the engine's status line
  uint64_t PromptCacheStats::*member;
  std::string_view health;       // in /health's prompt_cache; "": not there
  std::string_view metric;       // Prometheus family; "": none
  std::string_view metric_type;  // "gauge" or "counter"
  std::string_view metric_help;
};
// In the order of the metric families in /metrics.
inline constexpr PromptCacheField kPromptCacheFields[] = {
    {"max_bytes", &PromptCacheStats::max_bytes, "max_bytes_per_node", "tandem_prompt_cache_capacity_bytes", "gauge",
     "The prompt cache's bound on each node (0: off)."},
    {"max_disk_bytes", &PromptCacheStats::max_disk_bytes, "max_disk_bytes_per_node",
     "tandem_prompt_cache_disk_capacity_bytes", "gauge",
     "The prompt cache's disk bound on each node (0: no disk tier)."},
    {"entries", &PromptCacheStats::entries, "entries", "tandem_prompt_cache_entries", "gauge",
     "Prompt-cache states held."},
    {"spills", &PromptCacheStats::spills, "spills", "tandem_prompt_cache_spills_total", "counter",
     "States moved from memory to disk to keep every node within the memory bound."},
    {"hits", &PromptCacheStats::hits, "hits", "tandem_prompt_cache_hits_total", "counter",
     "Requests that found a cached state sharing a longer prefix than any slot."},
    {"misses", &PromptCacheStats::misses, "misses", "tandem_prompt_cache_misses_total", "counter",
     "Requests that found no cached state longer than the slots' prefixes."},
    {"evictions", &PromptCacheStats::evictions, "evictions", "tandem_prompt_cache_evictions_total", "counter",
     "States dropped to keep every node within the bound."},
    {"restored_tokens", &PromptCacheStats::restored_tokens, "restored_tokens",
     "tandem_prompt_cache_restored_tokens_total", "counter",
     "Prompt tokens restored from the cache instead of evaluated."},
    {"failed_restores", &PromptCacheStats::failed_restores, "failed_restores",
     "tandem_prompt_cache_failed_restores_total", "counter",
     "Cached states that could not be restored (the prompt was evaluated)."},
    {"saves", &PromptCacheStats::saves, "saves", "", "", ""},
    {"saved_bytes", &PromptCacheStats::saved_bytes, "saved_bytes", "", "", ""},
    {"saved_worker_bytes", &PromptCacheStats::saved_worker_bytes, "saved_worker_bytes", "", "", ""},
    // Per node in /health and /metrics, with the workers' shares (the gateway's own rows).
    {"bytes", &PromptCacheStats::bytes, "", "", "", ""},
    {"disk_bytes", &PromptCacheStats::disk_bytes, "", "", "", ""},
    {"worker_bytes", &PromptCacheStats::worker_bytes, "", "", "", ""},
    {"worker_disk_bytes", &PromptCacheStats::worker_disk_bytes, "", "", "", ""},
};

// Speculative decoding (engine/speculation.h), since the engine started.
struct SpeculationStats {
  uint64_t steps = 0;         // decode steps that checked a draft
  uint64_t drafted = 0;       // draft tokens checked
  uint64_t accepted = 0;      // of which the target kept
  double draft_seconds = 0;   // spent drafting
  double verify_seconds = 0;  // spent in decode steps that checked drafts
  double synth_len = 0;       // benchmarks' synthetic acceptance (speculation.h); 0: off
};

// One row per counter, as kPromptCacheFields: its name on the wire, in /health's speculative and
// in /metrics.
struct SpeculationField {
  std::string_view name;
  uint64_t SpeculationStats::*member;
  std::string_view metric;
  std::string_view metric_help;
};
inline constexpr SpeculationField kSpeculationFields[] = {
    {"steps", &SpeculationStats::steps, "tandem_speculative_steps_total",
     "Decode steps that checked drafted tokens (speculative decoding)."},
    {"drafted", &SpeculationStats::drafted, "tandem_speculative_drafted_tokens_total",
     "Drafted tokens the model checked."},
    {"accepted", &SpeculationStats::accepted, "tandem_speculative_accepted_tokens_total",
     "Drafted tokens the model kept: each is one decode step saved."},
};
// The same for the times, in seconds.
struct SpeculationTime {
  std::string_view name;
  double SpeculationStats::*member;
  std::string_view metric;
  std::string_view metric_help;
};
inline constexpr SpeculationTime kSpeculationTimes[] = {
    {"draft_seconds", &SpeculationStats::draft_seconds, "tandem_speculative_draft_seconds_total",
     "Time spent drafting, the draft model's reading of each batch included."},
    {"verify_seconds", &SpeculationStats::verify_seconds, "tandem_speculative_verify_seconds_total",
     "Time of the decode steps that checked drafted tokens."},
};

// The engine's state in its status. The engine sends the first three; `stopped` is the gateway's
// word (in /health) for no engine running.
enum class EngineState { loading, ready, failed, stopped };
struct EngineStateName {
  EngineState state;
  std::string_view name;
};
// The one name table: the wire's and /health's names.
inline constexpr EngineStateName kEngineStateNames[] = {{EngineState::loading, "loading"},
                                                        {EngineState::ready, "ready"},
                                                        {EngineState::failed, "failed"},
                                                        {EngineState::stopped, "stopped"}};
std::string_view engine_state_name(EngineState state);
std::optional<EngineState> engine_state_from_name(std::string_view name);  // none: no such state

struct EngineStatus {
  EngineState state = EngineState::loading;
  LoadProgress load;
  int slots_busy = 0, slots_total = 0;
  int waiting = 0;          // requests queued for a free slot
  double tokens_per_s = 0;  // generated tokens per second over the last few seconds
  PromptCacheStats prompt_cache;
  std::string speculative = "off";  // the mode: off, ngram or draft
  SpeculationStats speculation;
  std::string error;  // state failed: why
};

// Engine → client.
struct EngineEvent {
  // A submitted request's events: one `started` once its prompt is tokenized and matched against
  // the cache (usage.prompt_tokens and usage.cached_tokens known, before the first token), then
  // deltas, then one done or error (an error may also come before `started`).
  enum class Type { started, delta, done, error, status, result };
  Type type = Type::delta;
  std::string id;  // started, delta, done, error: the request; empty for a status and for an
                   // error about a line that named no request
  // delta
  std::string text, reasoning;
  std::vector<ToolCallDelta> tool_calls;
  // delta (and done, for tokens that produced no delta): one entry per generated token since the
  // last event, only when the body asked for logprobs
  std::vector<TokenLogprob> logprobs;
  // done (usage also in started)
  std::string finish_reason;  // "stop", "length", "tool_calls"
  std::string stop_sequence;  // finish "stop" by one of the request's stop strings: that string
  Usage usage;
  std::vector<int32_t> tokens;      // done: the generated token ids, only when the body asked "return_tokens";
                                    // result of tokenize: the tokens
  std::vector<std::string> pieces;  // result of tokenize: each token's text (bytes may be partial UTF-8)
  std::string content;              // result of detokenize: the text; result of count: the rendered prompt
  int count = 0;                    // result of count: the rendered prompt's tokens
  // error
  StatusCode code = StatusCode::ok;
  std::string message;
  // status
  EngineStatus status;
};

// Wire names of the error codes: invalid_argument, resource_exhausted, unavailable, cancelled,
// internal (not_found travels as invalid_argument).
const char* wire_code(StatusCode code);

// One line each, without the trailing newline. Invalid UTF-8 in texts is replaced, never thrown.
std::string encode_request(const EngineRequest& request);
std::string encode_event(const EngineEvent& event);

// Parse one line. Errors name what is wrong ("'op' must be one of submit, cancel, status, ...").
Result<EngineRequest> decode_request(std::string_view line);
Result<EngineEvent> decode_event(std::string_view line);

}  // namespace tandem::engine
