// `tandem serve`: reads the configuration, asks every worker what it has, plans the placement,
// starts the forwarders and the engine (Supervisor) and the HTTP API (ApiServer), and runs until
// asked to stop, then drains.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "plan/solver.h"

namespace tandem::gateway {

struct ServeOptions {
  config::Config config;       // the file's settings with command-line overrides applied
  std::string engine_program;  // "" = tandem-engine beside this program
};

// The flags serve passes on to tandem-engine, the data path's switches (datapath/switches.h),
// as "a, b, c"; the others serve sets itself.
std::string engine_flags_list();
// OK when every flag of `flags` is one of the switches; otherwise names it and lists those.
Status check_engine_flags(const std::vector<std::string>& flags);
// The engine flags serve starts the engine with under `split`: the user's `flags`, and
// --no-worker-embedding when the plan found no room for the token embedding on the worker of
// layer 0 (plan::LlamaSplit::embedding_on_worker), once.
std::vector<std::string> engine_flags_for(const plan::LlamaSplit& split, std::vector<std::string> flags);

// Serves until `stop` becomes true, then drains; a stop while it still waits for workers is a clean
// end too. Errors only for what cannot work at all: invalid_argument or not_found for a bad
// configuration (an unreadable or header-only model, a key database or secret file that is
// refused, a hand split that does not cover the model), resource_exhausted for a placement that
// does not fit (the message says what would), unavailable for an address that cannot be bound.
// Workers that are down at start are waited for, and /health says which and why.
Status run_serve(const ServeOptions& options, const std::atomic<bool>& stop);

}  // namespace tandem::gateway
