#include "gateway/serve_state.h"

#include "common/name_table.h"

namespace tandem::gateway {

std::string_view serve_state_name(ServeState state) { return name_in(kServeStateNames, state); }

std::optional<ServeState> serve_state_from_name(std::string_view name) { return state_in(kServeStateNames, name); }

}  // namespace tandem::gateway
