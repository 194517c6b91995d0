#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

namespace tandem::log {
namespace {

Format initial_format() {
  const char* env = std::getenv("TANDEM_LOG_FORMAT");
  if (env == nullptr) return Format::text;
  auto f = parse_format(env);
  return f.is_ok() ? f.value() : Format::text;
}

std::atomic<Format>& current() {
  static std::atomic<Format> f{initial_format()};
  return f;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::debug:
      return "debug";
    case Level::info:
      return "info";
    case Level::warn:
      return "warn";
    case Level::error:
      return "error";
  }
  return "info";
}

}  // namespace

std::string timestamp_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  tm t{};
  ::gmtime_r(&tv.tv_sec, &t);
  char stamp[64];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  return stamp;
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0)
    n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0)
    n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

}  // namespace

Result<Format> parse_format(const std::string& name) {
  if (name == "text") return Format::text;
  if (name == "json") return Format::json;
  return Status::invalid_argument("log format '" + name + "': expected text or json");
}

void set_format(Format f) { current() = f; }
Format format() { return current(); }
const char* format_name(Format f) { return f == Format::json ? "json" : "text"; }

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (c >= 0x80) {
      const size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
        continue;
      }
      out.append(s.substr(i, n));
      i += n;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

std::string render(Format f, const std::string& ts, Level level, std::string_view component, std::string_view msg,
                   const Fields& fields) {
  std::string line;
  if (f == Format::json) {
    line = "{\"ts\":" + json_quote(ts) + ",\"level\":\"" + level_name(level) +
           "\",\"component\":" + json_quote(component) + ",\"msg\":" + json_quote(msg);
    for (const auto& [k, v] : fields) {
      // The four keys above are the record's own; a field may not replace them.
      if (k == "ts" || k == "level" || k == "component" || k == "msg") continue;
      line += "," + json_quote(k) + ":" + json_quote(v);
    }
    return line + "}";
  }
  line = ts + " ";
  if (!component.empty()) line.append(component).append(": ");
  if (level == Level::warn) line += "WARNING: ";
  if (level == Level::error) line += "ERROR: ";
  line.append(msg);
  for (const auto& [k, v] : fields) {
    const bool quote = v.empty() || v.find_first_of(" \t\"=") != std::string::npos;
    line += " " + k + "=" + (quote ? json_quote(v) : v);
  }
  // A record is one line: a message with newlines in it must not forge another record.
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

void write(Level level, std::string_view component, std::string_view msg, const Fields& fields) {
  static std::mutex mutex;
  const std::string line = render(format(), timestamp_now(), level, component, msg, fields) + "\n";
  std::lock_guard<std::mutex> lock(mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void relay_lines_as_records(int fd, int out_fd, std::string component) {
  std::thread([fd, out_fd, component = std::move(component)] {
    std::string pending;
    char buf[4096];
    auto emit = [&](const std::string& line) {
      if (line.empty()) return;
      const std::string rec =
          (line.compare(0, 2, "{\"") == 0 ? line
                                          : render(Format::json, timestamp_now(), Level::info, component, line, {})) +
          "\n";
      (void)!::write(out_fd, rec.data(), rec.size());
    };
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
      pending.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
        emit(pending.substr(0, nl));
    }
    emit(pending);  // a last line without its newline (a process that died mid-line)
    ::close(fd);
  }).detach();
}

}  // namespace tandem::log
