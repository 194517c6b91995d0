#include "gateway/metrics.h"

#include <vector>

namespace tandem::gateway {

namespace p = prometheus;

void Metrics::request_finished(const std::string& endpoint, int http_status, double seconds, double ttft_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, http_status}];
  latency_[endpoint].observe(kLatency, seconds);
  if (ttft_seconds >= 0) ttft_[endpoint].observe(kTtft, ttft_seconds);
}

void Metrics::tokens(uint64_t prompt, uint64_t completion) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}

void Metrics::set_in_flight(int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_ = n;
}

std::string Metrics::render(ServeState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<p::Sample> requests;
  for (const auto& [k, v] : requests_) {
    requests.push_back(
        {"endpoint=\"" + p::label(k.first) + "\",code=\"" + std::to_string(k.second) + "\"", static_cast<double>(v)});
  }
  std::vector<p::Sample> states;
  for (const ServeStateName& st : kServeStateNames) {
    states.push_back({"state=\"" + std::string(st.name) + "\"", state == st.state ? 1.0 : 0.0});
  }
  auto series = [](const std::map<std::string, Histogram>& by_endpoint) {
    std::vector<std::pair<std::string, Histogram>> out;
    for (const auto& [endpoint, h] : by_endpoint) out.emplace_back("endpoint=\"" + p::label(endpoint) + "\"", h);
    return out;
  };
  return p::family(
             "tandem_http_requests_total", "counter",
             "HTTP API requests by endpoint and status code (a stream cut by an error counts with the error's status).",
             requests) +
         p::histogram_family("tandem_request_duration_seconds", "Time from request to last byte, by endpoint.",
                             kLatency, series(latency_)) +
         p::histogram_family("tandem_time_to_first_token_seconds",
                             "Time from request to the first generated token, by endpoint.", kTtft, series(ttft_)) +
         p::family("tandem_tokens_total", "counter", "Tokens processed, by kind.",
                   {{"kind=\"prompt\"", static_cast<double>(prompt_tokens_)},
                    {"kind=\"completion\"", static_cast<double>(completion_tokens_)}}) +
         p::family("tandem_requests_in_flight", "gauge", "Generation requests admitted and not finished.",
                   {{"", static_cast<double>(in_flight_)}}) +
         p::family("tandem_state", "gauge", "1 for the state /health answers now, 0 for the others.", states);
}

}  // namespace tandem::gateway
