// Small string helpers shared by the command line and the libraries.
#pragma once

#include <string>
#include <vector>

namespace tandem {

// "a, b,,c" -> {"a", "b", "c"}: comma-separated items, spaces dropped, empty items skipped.
std::vector<std::string> split_commas(const std::string& text);

}  // namespace tandem
