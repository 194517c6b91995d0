// The one logger of every long-running tandem process (serve, worker, engine, link forward).
//
// Each record is written whole, as one line on stderr, even when several threads log at once:
//   text (default)  2026-12-02T10:20:33.125Z worker: connection from 10.0.0.1:5123: accepted
//   json            {"ts":"2026-12-02T10:20:33.125Z","level":"info","component":"worker","msg":"...","peer":"..."}
// Text lines carry warnings and errors as "WARNING: " / "ERROR: " before the message, and the
// fields as ` key=value` after it. JSON lines are one object each, keys in that order, then the
// fields (as strings), so `journalctl -o cat | jq` works. The format is process-wide: set it once,
// before threads start (`--log-format`, or the environment variable TANDEM_LOG_FORMAT).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::log {

enum class Format { text, json };
enum class Level { debug, info, warn, error };

using Fields = std::vector<std::pair<std::string, std::string>>;

// "text" or "json"; anything else is invalid_argument naming the accepted values.
Result<Format> parse_format(const std::string& name);
void set_format(Format format);
Format format();
const char* format_name(Format format);

// Writes one record. `component` names the part of tandem ("serve", "worker", "engine", ...).
void write(Level level, std::string_view component, std::string_view msg, const Fields& fields = {});

inline void info(std::string_view component, std::string_view msg, const Fields& fields = {}) {
  write(Level::info, component, msg, fields);
}
inline void warn(std::string_view component, std::string_view msg, const Fields& fields = {}) {
  write(Level::warn, component, msg, fields);
}
inline void error(std::string_view component, std::string_view msg, const Fields& fields = {}) {
  write(Level::error, component, msg, fields);
}

// Reads lines from `fd` until its end and writes each to `out_fd` as a record of `component` (a
// line that is a JSON record already passes unchanged), on a detached thread that closes `fd`
// when done. For output that tandem does not write itself (ggml's prints, a child's abort
// message), so that JSON logs stay one record per line.
void relay_lines_as_records(int fd, int out_fd, std::string component);

// Now, as records show it: "2026-12-02T10:20:33.125Z".
std::string timestamp_now();

// The record as it would be written, without the newline (exposed for tests).
std::string render(Format format, const std::string& ts, Level level, std::string_view component, std::string_view msg,
                   const Fields& fields);

// `s` as a JSON string literal, quotes included; invalid UTF-8 bytes become U+FFFD.
std::string json_quote(std::string_view s);

}  // namespace tandem::log
