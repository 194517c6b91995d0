// One-line log records on stderr, "2026-12-02T10:20:33.125Z <line>", written whole even when
// several threads log at once. For the long-running commands (worker, forwarder).
#pragma once

#include <string>

namespace tandem::link {

void log_line(const std::string& line);

}  // namespace tandem::link
