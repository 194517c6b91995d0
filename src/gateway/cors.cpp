// CORS for browser front-ends: off unless [server] cors_origins lists origins. A browser sends a
// preflight OPTIONS before a request with an API key or a JSON body; it goes on only when the
// answer allows the origin, the method and the headers it asked for.
#include <httplib.h>

#include <algorithm>

#include "gateway/api_server.h"

namespace tandem::gateway {
namespace {

// Every header the SDKs and browser clients send: keys, versions, betas, the SDKs' telemetry.
constexpr const char* kAllowedHeaders =
    "authorization, x-api-key, content-type, accept, anthropic-version, anthropic-beta, "
    "anthropic-dangerous-direct-browser-access, openai-beta, openai-organization, openai-project, x-app, "
    "x-stainless-arch, x-stainless-lang, x-stainless-os, x-stainless-package-version, x-stainless-retry-count, "
    "x-stainless-runtime, x-stainless-runtime-version, x-stainless-timeout, x-stainless-helper-method, "
    "x-stainless-async";
constexpr const char* kAllowedMethods = "GET, POST, OPTIONS";

}  // namespace

bool ApiServer::handle_cors(const httplib::Request& req, httplib::Response& res) const {
  const std::string origin = req.get_header_value("Origin");
  if (origin.empty() || options_.cors_origins.empty()) return false;
  const auto& allowed = options_.cors_origins;
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  const bool ok = any || std::find(allowed.begin(), allowed.end(), origin) != allowed.end();
  const bool preflight = req.method == "OPTIONS" && req.has_header("Access-Control-Request-Method");
  if (!ok) {
    if (!preflight) return false;  // the browser withholds the answer itself: no header, no access
    res.status = 403;
    res.set_content("{\"error\":{\"message\":\"origin '" + origin +
                        "' is not in [server] cors_origins\",\"type\":\"permission_error\","
                        "\"param\":null,\"code\":null}}",
                    "application/json");
    return true;
  }
  // The origin itself, not "*": a "*" answer cannot go with credentials, and the key is one.
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Vary", "Origin");
  if (!preflight) {
    res.set_header("Access-Control-Expose-Headers", "Retry-After, Content-Type");
    return false;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", kAllowedMethods);
  // What the browser asks for too: a new SDK header must not break a front-end that was allowed.
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers", std::string(kAllowedHeaders) + (asked.empty() ? "" : ", " + asked));
  res.set_header("Access-Control-Max-Age", "600");
  return true;
}

}  // namespace tandem::gateway
