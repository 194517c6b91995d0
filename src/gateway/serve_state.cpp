#include "gateway/serve_state.h"

namespace tandem::gateway {

std::string_view serve_state_name(ServeState state) {
  for (const ServeStateName& s : kServeStateNames) {
    if (s.state == state) return s.name;
  }
  return "?";
}

std::optional<ServeState> serve_state_from_name(std::string_view name) {
  for (const ServeStateName& s : kServeStateNames) {
    if (s.name == name) return s.state;
  }
  return std::nullopt;
}

}  // namespace tandem::gateway
