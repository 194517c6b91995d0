// Kept for callers not yet moved to common/log.h: one info record of component "link" (or none,
// when the line names its own subject). New code logs through tandem::log directly.
#pragma once

#include <string>

namespace tandem::link {

void log_line(const std::string& line);

}  // namespace tandem::link
