// The status page at `/`: one self-contained HTML document (web/status.html, embedded at build
// time; no external fetches, enforced by its Content-Security-Policy) that polls /status.json.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/api_server.h"
#include "plan/solver.h"

namespace tandem::gateway {

// The page, as built from web/status.html.
const std::string& status_page_html();

// What /status.json answers: `state`, `model`, `requests_in_flight`, `engine` (slots, waiting,
// tokens_per_s: asked live), `load` (fraction, bytes, rate, eta_s), `last_error`, `plan`
// (estimated tok/s) and `nodes`: each node of `info` (the plan: name, role, devices with layers
// and memory) with its live link state and bytes from `health`.
nlohmann::json status_snapshot(const HealthReport& health, const nlohmann::json& info, const std::string& state,
                               int in_flight, const std::string& model_id);

// The plan as the status page shows it: {"tokens_per_s": estimate, "n_layer": N, "nodes": [{name,
// role, address, layers, devices: [{name, kind, first_layer, n_layers, need_bytes, free_bytes,
// margin_bytes}]}]}, head first. Memory is as the plan saw it at start.
nlohmann::json status_info_from_plan(const plan::Plan& plan, const std::vector<plan::NodeSpec>& nodes,
                                     uint32_t n_layer);

}  // namespace tandem::gateway
