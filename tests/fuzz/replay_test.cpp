// Every fuzz target built with the normal compiler and run over its committed seed corpus and
// regression inputs (tests/fuzz/corpus/<target>, tests/fuzz/regressions/<target>), so that what
// fuzzing once found stays fixed without clang. `make fuzz` runs the real fuzzing.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" int fuzz_openai_request(const uint8_t* data, size_t size);
extern "C" int fuzz_messages_request(const uint8_t* data, size_t size);
extern "C" int fuzz_responses_request(const uint8_t* data, size_t size);
extern "C" int fuzz_engine_protocol(const uint8_t* data, size_t size);
extern "C" int fuzz_config(const uint8_t* data, size_t size);
extern "C" int fuzz_link_handshake(const uint8_t* data, size_t size);
extern "C" int fuzz_gguf(const uint8_t* data, size_t size);
extern "C" int fuzz_step_inputs(const uint8_t* data, size_t size);

namespace {

// Runs `target` on every file of the target's corpus and regression folders; returns the count.
size_t replay(const std::string& name, int (*target)(const uint8_t*, size_t)) {
  size_t n = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const std::filesystem::path dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/fuzz" / kind / name;
    if (!std::filesystem::exists(dir)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(e.path().string());
      EXPECT_EQ(target(bytes.data(), bytes.size()), 0);
      ++n;
    }
  }
  return n;
}

TEST(FuzzReplay, OpenAiRequest) { EXPECT_GT(replay("openai_request", fuzz_openai_request), 0u); }
TEST(FuzzReplay, MessagesRequest) { EXPECT_GT(replay("messages_request", fuzz_messages_request), 0u); }
TEST(FuzzReplay, ResponsesRequest) { EXPECT_GT(replay("responses_request", fuzz_responses_request), 0u); }
TEST(FuzzReplay, EngineProtocol) { EXPECT_GT(replay("engine_protocol", fuzz_engine_protocol), 0u); }
TEST(FuzzReplay, Config) { EXPECT_GT(replay("config", fuzz_config), 0u); }
TEST(FuzzReplay, LinkHandshake) { EXPECT_GT(replay("link_handshake", fuzz_link_handshake), 0u); }
TEST(FuzzReplay, Gguf) { EXPECT_GT(replay("gguf", fuzz_gguf), 0u); }
TEST(FuzzReplay, StepInputs) { EXPECT_GT(replay("step_inputs", fuzz_step_inputs), 0u); }

}  // namespace
