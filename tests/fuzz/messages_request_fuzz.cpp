// Fuzz target: a client's Anthropic Messages body (POST /v1/messages) as the gateway sees it: JSON
// parsing and the conversion to an OpenAI chat body (gateway/anthropic.cpp), the error body built
// from whatever it says, and for a body it accepts, what the chat path needs of the result
// (chat_body.h) and the message and stream answered from it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "chat_body.h"
#include "gateway/anthropic.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::gateway;
  const std::string body(reinterpret_cast<const char*>(data), size);
  anthropic::MessagesDialect d;
  auto r = d.parse(body, "tiny");
  if (!r.is_ok()) {
    // The message quotes the client's bytes (a role, a block type): it must still serialise.
    (void)d.error_body(r.status());
    return 0;
  }
  tandem::fuzz::require_chat_body(r.value(), "tiny");
  if (d.streaming() != r->value("stream", false)) std::abort();
  const CallInfo call{"msg_fuzz", "tiny", 0, r.value()};
  GenerationEvent done;
  done.type = GenerationEvent::Type::done;
  done.finish_reason = "stop";
  if (r->contains("stop")) done.stop_sequence = r.value()["stop"][0];
  Accumulated a;
  a.add(done);
  (void)d.response(call, a);
  (void)d.stream_open(call);
  (void)d.stream_event(call, done, true);
  return 0;
}
