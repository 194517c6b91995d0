// Chat rendering against llama.cpp's own server, and reading tool calls and reasoning back.
#include "engine/chat_template.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/build_info.h"
#include "engine/model_loader.h"
#include "support/process.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;
using tandem::testing::ChildProcess;
using tandem::testing::ScratchDir;

// A minimal HTTP/1.1 POST to 127.0.0.1:`port`; returns the response body, "" on failure.
std::string http_post(int port, const std::string& path, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "POST " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string resp;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t start = resp.find("\r\n\r\n");
  if (resp.compare(0, 12, "HTTP/1.1 200") != 0 || start == std::string::npos) return "";
  return resp.substr(start + 4);
}

json weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Current weather of a city"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
              {"required", json::array({"city"})}}}}}};
}

json conversation() {
  return json::array({
      {{"role", "system"}, {"content", "You answer briefly."}},
      {{"role", "user"}, {"content", "What is the weather in Paris?"}},
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls",
        json::array({{{"id", "call_1"},
                      {"type", "function"},
                      {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris","days":2})"}}}}})}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "Sunny, 21 C"}},
      {{"role", "assistant"}, {"content", "It is sunny in Paris."}},
      {{"role", "user"}, {"content", "And in Lyon?"}},
  });
}

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_path_ = dir_.file("tiny.gguf");
    ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model_path_, {}).is_ok());
    LoadOptions lo;
    lo.model = model_path_;
    auto m = load_model(lo);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    model_ = std::move(m.value());
    auto t = ChatTemplates::load(model_.get());
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    templates_.emplace(std::move(t.value()));
  }

  ScratchDir dir_;
  std::string model_path_;
  ModelPtr model_;
  std::optional<ChatTemplates> templates_;
};

TEST_F(ChatTemplateTest, AMultiTurnConversationWithToolsRendersAsLlamaServerRendersIt) {
  const int port = tandem::testing::free_port();
  ChildProcess server({TANDEM_LLAMA_SERVER_EXE, "-m", model_path_, "--host", "127.0.0.1", "--port",
                       std::to_string(port), "-c", "1024", "-np", "1", "-t", "1", "--no-warmup"},
                      dir_.file("llama-server.log"));
  ASSERT_TRUE(tandem::testing::wait_for_port(port, 60000));
  std::vector<json> bodies = {
      {{"messages", conversation()}, {"tools", json::array({weather_tool()})}},
      {{"messages", conversation()}},
      {{"messages", conversation()},
       {"tools", json::array({weather_tool()})},
       {"chat_template_kwargs", {{"enable_thinking", false}}}},
  };
  for (const json& body : bodies) {
    std::string answer;
    // The port opens before the model is loaded; /apply-template answers once it is.
    for (int i = 0; i < 300 && answer.empty(); ++i) {
      answer = http_post(port, "/apply-template", body.dump());
      if (answer.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_FALSE(answer.empty()) << "llama-server did not answer /apply-template";
    const std::string expected = json::parse(answer).at("prompt").get<std::string>();
    auto ours = templates_->render(body);
    ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
    EXPECT_EQ(ours->prompt, expected) << body.dump();
    EXPECT_NE(ours->prompt.find("get_weather"), std::string::npos);
  }
}

// What the model would write for a tool call is what the template renders for an assistant
// message with that call: parsing it back must give the call.
TEST_F(ChatTemplateTest, AGeneratedToolCallIsParsedBack) {
  json user = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  json asked = {{"messages", user}, {"tools", json::array({weather_tool()})}};
  auto prompt = templates_->render(asked);
  ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
  json with_call = user;
  with_call.push_back(
      {{"role", "assistant"},
       {"content", "Let me check."},
       {"reasoning_content", "The tool knows."},
       {"tool_calls", json::array({{{"id", "c1"},
                                    {"type", "function"},
                                    {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}})}});
  json rendered_body = {
      {"messages", with_call}, {"tools", json::array({weather_tool()})}, {"add_generation_prompt", false}};
  auto full = templates_->render(rendered_body);
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  ASSERT_EQ(full->prompt.compare(0, prompt->prompt.size(), prompt->prompt), 0) << full->prompt;
  std::string generated = full->prompt.substr(prompt->prompt.size());

  ChatStream stream(prompt->parser);
  EngineEvent all;
  // Fed in small pieces, as tokens arrive.
  for (size_t n = 1; n <= generated.size(); n += 3) {
    EngineEvent d;
    stream.update(generated.substr(0, n), true, &d);
    all.text += d.text;
    all.reasoning += d.reasoning;
    for (auto& c : d.tool_calls) all.tool_calls.push_back(c);
  }
  EngineEvent last;
  stream.update(generated, false, &last);
  all.text += last.text;
  all.reasoning += last.reasoning;
  for (auto& c : last.tool_calls) all.tool_calls.push_back(c);
  ASSERT_TRUE(stream.has_tool_calls()) << generated;
  std::string name, args;
  for (const auto& c : all.tool_calls) {
    EXPECT_EQ(c.index, 0);
    name += c.name;
    args += c.arguments;
  }
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(json::parse(args), json::parse(R"({"city":"Paris"})")) << args;
  EXPECT_EQ(all.text, "Let me check.");
  EXPECT_EQ(all.reasoning, "The tool knows.");
}

// The prompts llama-server renders for `bodies` on the model at `path` (its /apply-template) into
// `prompts`; "" or what went wrong.
std::string llama_server_prompts(const ScratchDir& dir, const std::string& path, const std::vector<json>& bodies,
                                 std::vector<std::string>* prompts) {
  const int port = tandem::testing::free_port();
  ChildProcess server({TANDEM_LLAMA_SERVER_EXE, "-m", path, "--host", "127.0.0.1", "--port", std::to_string(port), "-c",
                       "1024", "-np", "1", "-t", "1", "--no-warmup"},
                      dir.file("llama-server.log"));
  if (!tandem::testing::wait_for_port(port, 60000)) return "llama-server did not open its port";
  for (const json& body : bodies) {
    std::string answer;
    // The port opens before the model is loaded; /apply-template answers once it is.
    for (int i = 0; i < 300 && answer.empty(); ++i) {
      answer = http_post(port, "/apply-template", body.dump());
      if (answer.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (answer.empty()) return "llama-server did not answer /apply-template for " + body.dump();
    prompts->push_back(json::parse(answer).at("prompt").get<std::string>());
  }
  return "";
}

// Agents send system (and developer) turns in the middle of a conversation, and text as parts.
// Each is rendered where it stands, exactly as llama-server renders it on the same template, also
// where the template has no place for it (MiniMax-M3's leaves a later system turn out; Qwen3's
// shows it as a system turn; GLM's as its own): the same conversation always gives the same prefix.
TEST(ChatTemplateMidSystem, SystemAndDeveloperTurnsAnywhereRenderAsLlamaServerRendersThem) {
  const json parts = json::array({{{"type", "text"}, {"text", "Environment:"}}, {{"type", "text"}, {"text", " /tmp"}}});
  const json messages = json::array({
      {{"role", "system"}, {"content", "You answer briefly."}},
      {{"role", "user"}, {"content", parts}},
      {{"role", "system"}, {"content", parts}},
      {{"role", "assistant"}, {"content", "Hello."}},
      {{"role", "developer"}, {"content", "Reminder: be brief."}},
      {{"role", "user"}, {"content", "And now?"}},
  });
  json first_user_first = messages;
  first_user_first.erase(0);  // a conversation that opens with a user turn
  const std::vector<json> bodies = {{{"messages", messages}},
                                    {{"messages", messages}, {"tools", json::array({weather_tool()})}},
                                    {{"messages", first_user_first}}};
  for (const std::string preset : {"tiny", "tiny-qwen3moe", "tiny-glm4moe"}) {
    ScratchDir dir;
    const std::string path = dir.file(preset + ".gguf");
    ASSERT_TRUE(synth::write_model(synth::preset(preset).value(), path, {}).is_ok());
    std::vector<std::string> expected;
    const std::string failed = llama_server_prompts(dir, path, bodies, &expected);
    ASSERT_EQ(failed, "") << preset;
    LoadOptions lo;
    lo.model = path;
    auto model = load_model(lo);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    auto templates = ChatTemplates::load(model->get());
    ASSERT_TRUE(templates.is_ok()) << templates.status().to_string();
    for (size_t i = 0; i < bodies.size(); ++i) {
      auto ours = templates->render(bodies[i]);
      ASSERT_TRUE(ours.is_ok()) << preset << ": " << ours.status().to_string();
      EXPECT_EQ(ours->prompt, expected[i]) << preset << ": " << bodies[i].dump();
      EXPECT_NE(ours->prompt.find("And now?"), std::string::npos) << preset;
    }
  }
}

TEST_F(ChatTemplateTest, ReasoningIsKeptApartFromContent) {
  json asked = {{"messages", json::array({{{"role", "user"}, {"content", "Think first."}}})}};
  auto prompt = templates_->render(asked);
  ASSERT_TRUE(prompt.is_ok());
  ChatStream stream(prompt->parser);
  EngineEvent d;
  const std::string out = "<mm:think>Let me see.</mm:think>The answer is 4.";
  stream.update(out, false, &d);
  EXPECT_EQ(d.reasoning, "Let me see.");
  EXPECT_EQ(d.text, "The answer is 4.");
}

}  // namespace
}  // namespace tandem::engine
