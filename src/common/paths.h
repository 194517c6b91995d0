// Where this program and its companions live.
#pragma once

#include <string>

namespace tandem {

// The absolute path of the running executable ("" if /proc is unavailable).
std::string self_executable();

// `name` in the folder of the running executable, e.g. tandem-engine beside tandem.
std::string sibling_program(const std::string& name);

}  // namespace tandem
