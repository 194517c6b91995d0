// The states of `tandem serve` that /health, /metrics (tandem_state), the status page and systemd
// show: the enum and its one name table.
#pragma once

#include <optional>
#include <string_view>

namespace tandem::gateway {

enum class ServeState {
  starting,    // asking the workers for their devices, planning
  loading,     // the engine loads the model for the first time
  ready,       // a canary went through the whole split: requests are admitted
  degraded,    // a worker is lost or a canary failed
  recovering,  // the engine restarts or loads again after a failure
  draining,    // stopping: running requests finish, new ones are refused
};

struct ServeStateName {
  ServeState state;
  std::string_view name;
};
// Every state, in the order above (tandem_state's series follow it).
inline constexpr ServeStateName kServeStateNames[] = {
    {ServeState::starting, "starting"}, {ServeState::loading, "loading"},       {ServeState::ready, "ready"},
    {ServeState::degraded, "degraded"}, {ServeState::recovering, "recovering"}, {ServeState::draining, "draining"},
};

std::string_view serve_state_name(ServeState state);
std::optional<ServeState> serve_state_from_name(std::string_view name);  // none: no such state

}  // namespace tandem::gateway
