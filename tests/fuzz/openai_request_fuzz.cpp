// Fuzz target: a client's request body as the gateway sees it (JSON parsing and the OpenAI checks
// of gateway/openai.cpp), for both endpoints, and the error body built from whatever it says.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gateway/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::gateway;
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (Endpoint e : {Endpoint::chat, Endpoint::completion}) {
    auto r = openai::parse_request(body, e, "tiny");
    // The message quotes the client's bytes (a model name, a role): it must still serialise.
    if (!r.is_ok()) (void)openai::error_body(r.status());
  }
  return 0;
}
