#include "link/log.h"

#include "common/log.h"

namespace tandem::link {

void log_line(const std::string& line) { log::info("link", line); }

}  // namespace tandem::link
