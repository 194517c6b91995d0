// tandem's Anthropic Messages and OpenAI Responses routes answer in the shapes stock llama-server
// (the pinned v0.5.0) answers in, on the same model: every field llama-server sends, tandem sends
// with the same JSON type, and every stream event llama-server sends, tandem sends in the same order.
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cluster.h"
#include "common/build_info.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

// llama-server's own additions that no client reads: its timings.
const std::set<std::string> kLlamaServerOnly = {"timings"};

std::string type_of(const json& v) {
  if (v.is_number()) return "number";
  return v.type_name();
}

// What of `expected`'s shape `got` lacks: "path: missing" or "path: string, not number". Nulls
// match anything (an unset stop_sequence is null in one answer and absent or set in another).
void shape_diff(const json& expected, const json& got, const std::string& path, std::vector<std::string>* out) {
  if (expected.is_null() || got.is_null()) return;
  if (type_of(expected) != type_of(got)) {
    out->push_back(path + ": " + type_of(got) + ", not " + type_of(expected));
    return;
  }
  if (expected.is_object()) {
    for (const auto& [k, v] : expected.items()) {
      if (path.empty() && kLlamaServerOnly.count(k)) continue;
      if (!got.contains(k)) {
        out->push_back(path + "." + k + ": missing");
        continue;
      }
      shape_diff(v, got[k], path + "." + k, out);
    }
  } else if (expected.is_array() && !expected.empty() && !got.empty()) {
    shape_diff(expected[0], got[0], path + "[0]", out);
  }
}

std::string diff_text(const json& expected, const json& got) {
  std::vector<std::string> d;
  shape_diff(expected, got, "", &d);
  std::string s;
  for (const auto& l : d) s += l + "\n";
  return s;
}

struct Event {
  std::string name;
  json data;
};

// The events of a server-sent event stream, in order.
std::vector<Event> events_of(const std::string& body) {
  std::vector<Event> out;
  std::istringstream in(body);
  Event e;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("event: ", 0) == 0) e.name = line.substr(7);
    if (line.rfind("data: ", 0) == 0) e.data = json::parse(line.substr(6), nullptr, false);
    if (line.empty() && !e.name.empty()) {
      out.push_back(e);
      e = Event();
    }
  }
  return out;
}

// The event names with runs of one name collapsed (deltas come in runs of any length). A response
// cut by max_output_tokens ends as OpenAI ends it, `response.incomplete`, where llama-server says
// `response.completed`: the same place in the sequence.
std::vector<std::string> sequence_of(const std::vector<Event>& events, const std::set<std::string>& skip) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    if (skip.count(e.name)) continue;
    const std::string name = e.name == "response.incomplete" ? "response.completed" : e.name;
    if (out.empty() || out.back() != name) out.push_back(name);
  }
  return out;
}

class ApiShapes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.wait_ready()) << cluster_.log();
    llama_port_ = free_port();
    llama_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{TANDEM_LLAMA_SERVER_EXE, "-m", cluster_.model(), "--host", "127.0.0.1", "--port",
                                 std::to_string(llama_port_), "-c", "1024", "-np", "1", "-t", "1", "--no-warmup"},
        dir_.file("llama-server.log"));
    ASSERT_TRUE(wait_for_port(llama_port_, 60000));
    httplib::Client c("127.0.0.1", llama_port_);
    for (int i = 0; i < 300; ++i) {  // the port opens before the model is loaded
      auto r = c.Get("/health");
      if (r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "llama-server never became ready";
  }
  // The same request to both; each answer's body.
  std::pair<std::string, std::string> both(const std::string& path, const json& body) {
    httplib::Client stock("127.0.0.1", llama_port_), ours("127.0.0.1", cluster_.port());
    stock.set_read_timeout(60, 0);
    ours.set_read_timeout(60, 0);
    auto a = stock.Post(path, body.dump(), "application/json");
    auto b = ours.Post(path, {{"x-api-key", cluster_.key()}, {"anthropic-version", "2023-06-01"}}, body.dump(),
                       "application/json");
    EXPECT_TRUE(a && a->status == 200) << path << " llama-server: " << (a ? a->body : "no answer");
    EXPECT_TRUE(b && b->status == 200) << path << " tandem: " << (b ? b->body : "no answer");
    return {a ? a->body : "", b ? b->body : ""};
  }
  void compare_streams(const std::string& path, const json& body, const std::set<std::string>& skip) {
    auto [stock, ours] = both(path, body);
    const auto a = events_of(stock), b = events_of(ours);
    ASSERT_FALSE(a.empty()) << stock;
    EXPECT_EQ(sequence_of(a, skip), sequence_of(b, skip)) << "llama-server:\n" << stock << "\ntandem:\n" << ours;
    // The first event of each name: the same fields.
    std::set<std::string> seen;
    for (const auto& ea : a) {
      if (!seen.insert(ea.name).second) continue;
      for (const auto& eb : b) {
        if (eb.name != ea.name && !(ea.name == "response.completed" && eb.name == "response.incomplete")) continue;
        EXPECT_EQ(diff_text(ea.data, eb.data), "") << path << " event " << ea.name << ":\n"
                                                   << ea.data.dump() << "\n"
                                                   << eb.data.dump();
        break;
      }
    }
  }

  ScratchDir dir_;
  LocalCluster cluster_{dir_, 1};
  int llama_port_ = 0;
  std::unique_ptr<ChildProcess> llama_;
};

const json kMessages = {{"model", "tiny"}, {"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
const json kResponses = {{"model", "tiny"}, {"max_output_tokens", 4}, {"input", "hi"}};

TEST_F(ApiShapes, MessagesAnswerAsLlamaServersDo) {
  auto [stock, ours] = both("/v1/messages", kMessages);
  const json a = json::parse(stock, nullptr, false), b = json::parse(ours, nullptr, false);
  ASSERT_TRUE(a.is_object() && b.is_object()) << stock << "\n" << ours;
  EXPECT_EQ(diff_text(a, b), "") << stock << "\n" << ours;
  EXPECT_EQ(b["stop_reason"], a["stop_reason"]);  // both stop at max_tokens
  json stream = kMessages;
  stream["stream"] = true;
  compare_streams("/v1/messages", stream, {"ping"});  // pings come when they come
}

TEST_F(ApiShapes, CountTokensCountsWhatLlamaServerCounts) {
  auto [stock, ours] = both("/v1/messages/count_tokens", {{"model", "tiny"}, {"messages", kMessages["messages"]}});
  const json a = json::parse(stock, nullptr, false), b = json::parse(ours, nullptr, false);
  ASSERT_TRUE(a.is_object() && b.is_object()) << stock << "\n" << ours;
  EXPECT_EQ(diff_text(a, b), "");
  EXPECT_EQ(b["input_tokens"], a["input_tokens"]) << "the same template and tokenizer count the same";
}

TEST_F(ApiShapes, ResponsesAnswerAsLlamaServersDo) {
  auto [stock, ours] = both("/v1/responses", kResponses);
  const json a = json::parse(stock, nullptr, false), b = json::parse(ours, nullptr, false);
  ASSERT_TRUE(a.is_object() && b.is_object()) << stock << "\n" << ours;
  EXPECT_EQ(diff_text(a, b), "") << stock << "\n" << ours;
  json stream = kResponses;
  stream["stream"] = true;
  compare_streams("/v1/responses", stream, {});
}

}  // namespace
}  // namespace tandem::testing
