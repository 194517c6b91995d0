#include "gateway/metrics.h"

#include <sstream>

namespace tandem::gateway {

void Metrics::request_finished(const std::string& endpoint, int http_status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, http_status}];
  Histogram& h = latency_[endpoint];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++h.counts[i];
  }
  ++h.count;
  h.sum += seconds;
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

std::string Metrics::render() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream o;
  o << "# HELP tandem_http_requests_total HTTP API requests by endpoint and status code.\n"
       "# TYPE tandem_http_requests_total counter\n";
  for (const auto& [k, v] : requests_) {
    o << "tandem_http_requests_total{endpoint=\"" << k.first << "\",code=\"" << k.second << "\"} " << v << "\n";
  }
  o << "# HELP tandem_request_duration_seconds Time from request to last byte, by endpoint.\n"
       "# TYPE tandem_request_duration_seconds histogram\n";
  for (const auto& [endpoint, h] : latency_) {
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      o << "tandem_request_duration_seconds_bucket{endpoint=\"" << endpoint << "\",le=\"" << kBuckets[i] << "\"} "
        << h.counts[i] << "\n";
    }
    o << "tandem_request_duration_seconds_bucket{endpoint=\"" << endpoint << "\",le=\"+Inf\"} " << h.count << "\n";
    o << "tandem_request_duration_seconds_sum{endpoint=\"" << endpoint << "\"} " << h.sum << "\n";
    o << "tandem_request_duration_seconds_count{endpoint=\"" << endpoint << "\"} " << h.count << "\n";
  }
  o << "# HELP tandem_tokens_total Tokens processed, by kind.\n# TYPE tandem_tokens_total counter\n"
    << "tandem_tokens_total{kind=\"prompt\"} " << prompt_tokens_ << "\n"
    << "tandem_tokens_total{kind=\"completion\"} " << completion_tokens_ << "\n";
  o << "# HELP tandem_requests_in_flight Generation requests admitted and not finished.\n"
       "# TYPE tandem_requests_in_flight gauge\n"
    << "tandem_requests_in_flight " << in_flight_ << "\n";
  return o.str();
}

}  // namespace tandem::gateway
