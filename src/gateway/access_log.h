// The access log: one line per API request, written when its response is complete (a stream's
// last byte included). What each line holds: the time (the record's), the key's name, the method
// and route, the model asked for, the HTTP status (for a stream cut by an error, the error's),
// prompt and completion tokens, time to first token and duration. Never a key or any request text.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tandem::gateway::access_log {

// What the handlers of one request learn for its line. Thread-local: httplib serves a request,
// its streamed body included, on one thread, and the next request on that thread starts anew.
struct Note {
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::string key = "-";  // the key's name, once authenticated
  std::string model;      // the model the request asked for
  int status = 0;         // overrides the response's status (a stream that ended in an error)
  double ttft_s = -1;     // < 0: no token
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  uint64_t cached_tokens = 0;  // of the prompt tokens, those read from a slot or the prompt cache
};

// Starts the note of the request this thread now serves.
void begin();
// This thread's note.
Note& note();
// Writes the request's line (not for GET /health and /metrics: probes would drown the rest).
void write(const httplib::Request& req, const httplib::Response& res);

}  // namespace tandem::gateway::access_log
