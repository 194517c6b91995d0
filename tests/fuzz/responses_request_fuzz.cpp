// Fuzz target: a client's OpenAI Responses body (POST /v1/responses) as the gateway sees it: JSON
// parsing and the conversion to an OpenAI chat body (gateway/responses.cpp), the error body built
// from whatever it says, and for a body it accepts, what the chat path needs of the result
// (chat_body.h) and the Response and stream answered from it, which echo the client's fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "chat_body.h"
#include "gateway/responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::gateway;
  const std::string body(reinterpret_cast<const char*>(data), size);
  responses::ResponsesDialect d;
  auto r = d.parse(body, "tiny");
  if (!r.is_ok()) {
    (void)d.error_body(r.status());
    return 0;
  }
  tandem::fuzz::require_chat_body(r.value(), "tiny");
  if (d.streaming() != r->value("stream", false)) std::abort();
  const CallInfo call{"resp_fuzz", "tiny", 0, r.value()};
  GenerationEvent delta;
  delta.reasoning = "r";
  delta.text = "t";
  delta.tool_calls = {{{"index", 0}, {"id", "call_1"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}};
  GenerationEvent done;
  done.type = GenerationEvent::Type::done;
  done.finish_reason = "tool_calls";
  Accumulated a;
  a.add(delta);
  a.add(done);
  (void)d.response(call, a);
  (void)d.stream_open(call);
  (void)d.stream_event(call, delta, true);
  (void)d.stream_event(call, done, false);
  return 0;
}
