// Every command that plans from one tandem.toml (plan -c, serve -c, doctor) sees the same nodes and
// makes the same placement: declared memory caps what the live nodes report, and a split given
// by hand in the file is the split all of them use.
#include <httplib.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

struct TwoWorkers {
  explicit TwoWorkers(const ScratchDir& dir) : files(make_cluster_files(dir, "k")) {
    for (int i = 0; i < 2; ++i) {
      ports[i] = free_port();
      workers[i] = std::make_unique<ChildProcess>(
          std::vector<std::string>{TANDEM_BINARY, "worker", "--listen", "127.0.0.1:" + std::to_string(ports[i]),
                                   "--secret-file", files.secret, "--name", "w" + std::to_string(i), "--threads", "1"},
          dir.file("worker" + std::to_string(i) + ".log"));
      EXPECT_TRUE(wait_for_port(ports[i], 10000));
    }
  }
  // A config whose memory caps are far below what these processes report free.
  std::string config(const ScratchDir& dir, int port, const std::string& extra_model_keys) const {
    const std::string path = dir.file("tandem.toml");
    write_file(path,
               "[cluster]\nsecret_file = \"cluster.key\"\nhead_name = \"box-a\"\nhead_memory = \"1100MiB\"\n"
               "[[worker]]\nname = \"w0\"\naddress = \"127.0.0.1:" +
                   std::to_string(ports[0]) +
                   "\"\nmemory = \"1200MiB\"\n"
                   "[[worker]]\nname = \"w1\"\naddress = \"127.0.0.1:" +
                   std::to_string(ports[1]) +
                   "\"\nmemory = \"1300MiB\"\n"
                   "[model]\npath = \"tiny.gguf\"\ncontext = 512\nthreads = 1\n" +
                   extra_model_keys + "[server]\nlisten = \"127.0.0.1:" + std::to_string(port) +
                   "\"\nkeys_db = \"keys.db\"\n");
    return path;
  }
  ClusterFiles files;
  int ports[2] = {0, 0};
  std::unique_ptr<ChildProcess> workers[2];
};

// The placement serve loaded, as /status.json shows it once the plan exists.
json served_placement(const ScratchDir& dir, const std::string& config, int port, const std::string& key) {
  ChildProcess serve({TANDEM_BINARY, "serve", "-c", config}, dir.file("serve.log"));
  httplib::Client c("127.0.0.1", port);
  json placement;
  for (int i = 0; i < 300 && placement.is_null() && serve.running(); ++i) {
    auto r = c.Get("/status.json", {{"Authorization", "Bearer " + key}});
    if (r && r->status == 200) placement = json::parse(r->body).value("placement", json());
    if (placement.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(30000), 0) << read_file(dir.file("serve.log"));
  return placement;
}

TEST(OnePlan, PlanAndServeOfOneConfigPlaceTheSameWithDeclaredMemoryAsACap) {
  ScratchDir dir;
  TwoWorkers cluster(dir);
  const int port = free_port();
  const std::string config = cluster.config(dir, port, "");
  auto planned = run_tandem("plan -c " + config + " --json", dir.file(""));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const json plan = json::parse(planned.out);
  // The caps, not the gigabytes these processes could have.
  ASSERT_EQ(plan["devices"].size(), 3u);
  EXPECT_EQ(plan["devices"][0]["free"], 1100ull << 20);
  EXPECT_EQ(plan["devices"][1]["free"], 1200ull << 20);
  EXPECT_EQ(plan["devices"][2]["free"], 1300ull << 20);
  // A worker's CPU is shown as what it is.
  EXPECT_EQ(plan["devices"][1]["kind"], "cpu");
  const json served = served_placement(dir, config, port, cluster.files.key);
  ASSERT_FALSE(served.is_null()) << read_file(dir.file("serve.log"));
  EXPECT_EQ(served.dump(), plan.dump());

  // doctor plans the same: it reports the capped memory.
  auto doctor = run_tandem("doctor -c " + config + " --pings 2 --probe-bytes 0", dir.file(""));
  EXPECT_NE(doctor.out.find("w0  memory: the plan gives it no layers (the model fits on fewer nodes); 1.17 GiB free"),
            std::string::npos)
      << doctor.out;  // its 1200 MiB
  EXPECT_NE(doctor.out.find("w1  memory: layers 1-3 need"), std::string::npos) << doctor.out;
  EXPECT_NE(doctor.out.find("of 1.27 GiB free"), std::string::npos) << doctor.out;  // its 1300 MiB
}

// A hand split in the file is the one every command uses: plan shows it, serve loads it.
TEST(OnePlan, AHandSplitInTheFileIsWhatPlanShowsAndServeLoads) {
  ScratchDir dir;
  TwoWorkers cluster(dir);
  const int port = free_port();
  const std::string config = cluster.config(dir, port, "layers = \"0-1,2-2,3-3\"\n");
  auto planned = run_tandem("plan -c " + config + " --json", dir.file(""));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const json plan = json::parse(planned.out);
  std::vector<int> counts;
  for (const auto& d : plan["devices"]) counts.push_back(d["n_layers"]);
  EXPECT_EQ(counts, (std::vector<int>{2, 1, 1}));
  const json served = served_placement(dir, config, port, cluster.files.key);
  EXPECT_EQ(served.dump(), plan.dump());
  // Counts given on the command line replace the file's split, in ranges or counts alike.
  auto flag = run_tandem("plan -c " + config + " --json --layers 2,1,1", dir.file(""));
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(json::parse(flag.out)["devices"], plan["devices"]);
  // A split that does not match the device order is refused with the order it would run in.
  auto wrong = run_tandem("plan -c " + config + " --layers 2-3,0-0,1-1", dir.file(""));
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("these counts run as 0-1,2-2,3-3"), std::string::npos) << wrong.err;
}

// A draft model in the file is held on the head by every command that plans: plan shows it and
// moves the model's layers off the head for it, serve plans the same at start-up.
TEST(OnePlan, ADraftModelInTheFileIsCountedOnTheHeadByPlanAndServeAlike) {
  ScratchDir dir;
  TwoWorkers cluster(dir);
  const int port = free_port();
  // A one-layer model of the same vocabulary: ~76 MiB on the head at 512 tokens, most of it the
  // logits of a batch.
  ASSERT_EQ(run_tandem("synth --preset tiny --layers 1 --dense-layers 1 -o " + dir.file("draft.gguf"), dir.file(""))
                .exit_code,
            0);
  const std::string config = cluster.config(dir, port, "speculative = \"draft\"\ndraft_model = \"draft.gguf\"\n");
  // 1200 MiB on the head: it holds the whole model alone, or the draft and none of its layers.
  std::string text = read_file(config);
  const std::string cap = "head_memory = \"1100MiB\"";
  ASSERT_NE(text.find(cap), std::string::npos) << text;
  write_file(config, text.replace(text.find(cap), cap.size(), "head_memory = \"1200MiB\""));

  auto planned = run_tandem("plan -c " + config + " --json", dir.file(""));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const json plan = json::parse(planned.out);
  const uint64_t draft = plan["speculative"]["draft"]["total"].get<uint64_t>();
  EXPECT_GT(draft, 60ull << 20);
  EXPECT_EQ(plan["speculative"]["draft"]["file"], dir.file("draft.gguf"));
  EXPECT_EQ(plan["devices"][0]["draft"].get<uint64_t>(), draft);
  EXPECT_EQ(plan["devices"][0]["n_layers"], 0);
  auto alone = run_tandem("plan -c " + config + " --json --speculative off", dir.file(""));
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(json::parse(alone.out)["devices"][0]["n_layers"], 4);

  const json served = served_placement(dir, config, port, cluster.files.key);
  ASSERT_FALSE(served.is_null()) << read_file(dir.file("serve.log"));
  EXPECT_EQ(served.dump(), plan.dump());
}

}  // namespace
}  // namespace tandem::testing
