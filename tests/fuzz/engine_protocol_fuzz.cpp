// Fuzz target: one line of the engine protocol, decoded as a request (what the engine reads) and
// as an event (what the gateway reads).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  if (auto r = tandem::engine::decode_request(line); r.is_ok()) (void)tandem::engine::encode_request(r.value());
  if (auto e = tandem::engine::decode_event(line); e.is_ok()) (void)tandem::engine::encode_event(e.value());
  return 0;
}
