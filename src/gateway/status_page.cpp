#include "gateway/status_page.h"

#include "gateway/status_page_html.h"

namespace tandem::gateway {

using nlohmann::json;

const std::string& status_page_html() {
  static const std::string html(kStatusPageHtml);
  return html;
}

json status_info_from_plan(const plan::Plan& p, const std::vector<plan::NodeSpec>& nodes, uint32_t n_layer) {
  // Layers per node from the split libllama gets.
  auto range = plan::layer_ranges(p.split, nodes);
  if (p.parallelism == plan::Parallelism::ffn_tensor) {
    // Every node whose devices run layers runs all of them.
    range.clear();
    for (const auto& d : p.devices) {
      if (d.n_layers > 0) range[d.node] = {0, static_cast<int>(n_layer)};
    }
  }
  json out = {{"tokens_per_s", p.tokens_per_second()},
              {"n_layer", n_layer},
              {"parallelism", plan::parallelism_name(p.parallelism)},
              {"nodes", json::array()}};
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto it = range.find(nodes[i].name);
    const int first = it == range.end() ? 0 : it->second.first, layers = it == range.end() ? 0 : it->second.second;
    json node = {{"name", nodes[i].name},
                 {"role", i == 0 ? "head" : "worker"},
                 {"address", nodes[i].address},
                 {"first_layer", first},
                 {"layers", layers},
                 {"devices", json::array()}};
    for (const auto& d : p.devices) {
      if (d.node != nodes[i].name) continue;
      node["devices"].push_back({{"name", d.device},
                                 {"kind", d.hardware},
                                 {"need_bytes", d.need()},
                                 {"free_bytes", d.free_bytes},
                                 {"margin_bytes", d.margin}});
    }
    out["nodes"].push_back(node);
  }
  return out;
}

json status_snapshot(const HealthReport& h, const json& info, const std::string& state, int in_flight,
                     const std::string& model_id) {
  const json& d = h.detail;
  json out = {{"state", state},
              {"model", model_id},
              {"requests_in_flight", in_flight},
              {"engine", d.value("engine", json::object())},
              {"load", d.value("load", json::object())},
              {"last_error", d.value("last_error", std::string())},
              {"phase", d.value("phase", std::string())},
              {"plan",
               {{"tokens_per_s", info.value("tokens_per_s", 0.0)},
                {"n_layer", info.value("n_layer", 0)},
                {"parallelism", info.value("parallelism", std::string("layer"))}}},
              {"placement", info.value("placement", json())},
              {"nodes", json::array()}};
  const json links = d.value("nodes", json::array());
  for (json node : info.value("nodes", json::array())) {
    if (node.value("role", "") == "head") {
      node["state"] = state;
    } else {
      node["state"] = "unused";  // the plan gave it no layers: no link was opened
      for (const auto& l : links) {
        if (l.value("name", "") != node.value("name", "")) continue;
        node["state"] = l.value("state", "?");
        node["bytes_to_worker"] = l.value("bytes_to_worker", uint64_t{0});
        node["bytes_from_worker"] = l.value("bytes_from_worker", uint64_t{0});
        node["last_error"] = l.value("last_error", std::string());
      }
    }
    out["nodes"].push_back(node);
  }
  return out;
}

}  // namespace tandem::gateway
