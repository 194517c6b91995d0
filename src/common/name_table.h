// A table of {state, name} rows (an enum's names, the one place they are written), read both ways.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace tandem {

// The name of `state` in `table`; "?" for a state the table lacks.
template <typename Row, size_t N, typename State>
constexpr std::string_view name_in(const Row (&table)[N], State state) {
  for (const Row& r : table) {
    if (r.state == state) return r.name;
  }
  return "?";
}

// The state named `name` in `table`; nullopt for a name it lacks.
template <typename Row, size_t N>
constexpr auto state_in(const Row (&table)[N], std::string_view name) -> std::optional<decltype(table[0].state)> {
  for (const Row& r : table) {
    if (r.name == name) return r.state;
  }
  return std::nullopt;
}

}  // namespace tandem
