#include <cstdio>

#include "bench/bench.h"
#include "cli/commands.h"

namespace tandem::cli {
namespace {

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "Measure decode, prefill, time to first token and aggregate speed of an OpenAI-compatible server");
  static bench::BenchOptions o;
  static bool json = false;
  cmd->add_option("--url", o.url, "Server base URL (tandem serve or llama-server), without /v1")->capture_default_str();
  cmd->add_option("--key", o.key, "API key (Authorization: Bearer)");
  cmd->add_option("--model", o.model, "Model id (default: the first of /v1/models)");
  cmd->add_option("--runs", o.runs, "Repetitions per figure; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--gen-tokens", o.gen_tokens, "Generated tokens for the decode figures")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--prefill-tokens", o.prefill_tokens, "Prompt sizes of the prefill figures")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--ttft-tokens", o.ttft_tokens, "Prompt size for decode and time to first token")
      ->capture_default_str();
  cmd->add_option("--decode-after", o.decode_after,
                  "Further prompt sizes after which decode is measured (decode_tps_after_N), e.g. 16384")
      ->delimiter(',');
  cmd->add_option("--concurrency", o.concurrency,
                  "Streams of the aggregate figures: the first's is aggregate_tps, each other's aggregate_tps_N")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--conversations", o.conversations,
                  "The prompt cache's figures: N conversations take turns round-robin (cold_ttft_ms, "
                  "returning_ttft_ms, continuing_ttft_ms; against tandem also link_bytes_per_restore, "
                  "link_bytes_per_save, state_kv_bytes); give the server one slot")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--conversation-tokens", o.conversation_tokens, "--conversations: each one's first prompt size")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 24));
  cmd->add_option("--turn-tokens", o.turn_tokens, "--conversations: tokens each turn adds")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--turns", o.turns, "--conversations: returning turns per conversation")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--only-conversations", o.only_conversations, "Measure the --conversations figures only");
  cmd->add_option("--timeout", o.timeout_s, "Seconds per request")->capture_default_str();
  cmd->add_flag("--json", json, "Print JSON (figures with median, min, max, samples)");
  cmd->callback([] {
    auto r = bench::run_bench(o);
    if (!r.is_ok()) fail(r.status().message());
    std::printf("%s",
                json ? (bench::result_to_json(r.value()) + "\n").c_str() : bench::format_result(r.value()).c_str());
  });
}

}  // namespace

TANDEM_COMMAND(90, register_bench);

}  // namespace tandem::cli
