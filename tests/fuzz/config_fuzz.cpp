// Fuzz target: tandem.toml as the config parser reads it (src/config).
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)tandem::config::parse_config(text, "fuzz.toml");
  return 0;
}
