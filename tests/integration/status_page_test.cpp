// The status page at / in headless Chromium (tests/integration/status_page.mjs): a real worker, a
// real `tandem serve` whose link runs through a throttling proxy so the load can be watched, and
// assertions on what the page shows. Screenshots land in the build folder (status-page/).
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs a script of scripts/ that prints one path: its exit status, the path, what it said on stderr.
struct ScriptPath {
  int rc;
  std::string path, err;
};
ScriptPath script_path(const ScratchDir& dir, const std::string& script) {
  const std::string out = dir.file(script + ".out"), err = dir.file(script + ".err");
  const int rc =
      std::system((std::string(TANDEM_SOURCE_DIR) + "/scripts/" + script + " >" + out + " 2>" + err).c_str());
  std::string path = slurp(out);
  path.erase(path.find_last_not_of("\n") + 1);
  return {rc, path, slurp(err)};
}

struct PageCluster {
  explicit PageCluster(const ScratchDir& dir) {
    EXPECT_EQ(run_tandem("secret new -o " + dir.file("cluster.key"), dir.file("")).exit_code, 0);
    EXPECT_EQ(run_tandem("synth --preset tiny -o " + dir.file("tiny.gguf"), dir.file("")).exit_code, 0);
    auto k = run_tandem("keys --db " + dir.file("keys.db") + " create --name page", dir.file(""));
    EXPECT_EQ(k.exit_code, 0) << k.err;
    key = k.out.substr(0, k.out.find('\n'));
  }
  // `layers`: per node, head first. With every layer on the worker (0,4) the link carries ~10 MiB,
  // more than the kernel's socket buffers hide, so a throttled load is visibly under way.
  std::vector<std::string> serve(const ScratchDir& dir, int port, const std::string& worker,
                                 const std::string& layers = "2,2") const {
    return {TANDEM_BINARY,
            "serve",
            "-m",
            dir.file("tiny.gguf"),
            "--secret-file",
            dir.file("cluster.key"),
            "--keys-db",
            dir.file("keys.db"),
            "--listen",
            "127.0.0.1:" + std::to_string(port),
            "--context",
            "512",
            "--model-id",
            "tiny",
            "-t",
            "1",
            "--worker",
            "w0=" + worker,
            "--layers",
            layers};
  }
  std::string key;
};

// Any Chromium or Chrome the machine has (scripts/find-browser.sh: Debian's package, a snap,
// Google's); skipped, saying so, when it has none.
TEST(StatusPage, ShowsTheLoadThenReadyAndLiveFiguresInChromium) {
  ScratchDir dir;
  const ScriptPath browser = script_path(dir, "find-browser.sh");
  if (browser.rc != 0) GTEST_SKIP() << "no browser to drive: " << browser.err;
  const ScriptPath node = script_path(dir, "node.sh");
  ASSERT_EQ(node.rc, 0) << "scripts/node.sh found no Node.js >= 22: " << node.err;
  PageCluster s(dir);
  const std::string root = TANDEM_SOURCE_DIR;
  const std::string modules_file = dir.file("modules.txt");
  ASSERT_EQ(std::system((root + "/scripts/install-playwright.sh >" + modules_file).c_str()), 0)
      << "scripts/install-playwright.sh failed";
  std::string modules = slurp(modules_file);
  modules.erase(modules.find_last_not_of("\n") + 1);

  const int worker_port = free_port(), proxy_port = free_port(), port = free_port();
  ChildProcess worker({TANDEM_BINARY, "worker", "--listen", "127.0.0.1:" + std::to_string(worker_port), "--secret-file",
                       dir.file("cluster.key"), "--name", "w0", "--threads", "1"},
                      dir.file("worker.log"));
  ASSERT_TRUE(wait_for_port(worker_port, 10000));
  // 1 MiB/s towards the worker: the tiny model takes several seconds to load.
  ChildProcess page({node.path,        root + "/tests/integration/status_page.mjs",
                     "--node-modules", modules,
                     "--browser",      browser.path,
                     "--url",          "http://127.0.0.1:" + std::to_string(port) + "/",
                     "--key",          s.key,
                     "--proxy-listen", std::to_string(proxy_port),
                     "--proxy-to",     "127.0.0.1:" + std::to_string(worker_port),
                     "--rate",         "1048576",
                     "--shots",        std::string(TANDEM_STATUS_SHOTS),
                     "--expect",       "head=no layers",
                     "--expect",       "w0=4 layers (0–3)"},
                    dir.file("page.log"));
  ASSERT_TRUE(wait_for_port(proxy_port, 20000)) << slurp(dir.file("page.log"));
  ChildProcess serve(s.serve(dir, port, "127.0.0.1:" + std::to_string(proxy_port), "0,4"), dir.file("serve.log"));
  const int rc = page.wait(250000);
  EXPECT_EQ(rc, 0) << "page:\n" << slurp(dir.file("page.log")) << "\nserve:\n" << slurp(dir.file("serve.log"));
  for (const char* shot : {"key-prompt.png", "loading.png", "ready.png", "generating.png"}) {
    std::ifstream png(std::string(TANDEM_STATUS_SHOTS) + "/" + shot);
    EXPECT_TRUE(png.good()) << shot;
  }
}

// /status.json needs a key unless the config says otherwise; the page itself holds no data.
TEST(StatusPage, TheFiguresNeedAKeyUnlessConfiguredPublic) {
  ScratchDir dir;
  PageCluster s(dir);
  const int worker_port = free_port();
  ChildProcess worker({TANDEM_BINARY, "worker", "--listen", "127.0.0.1:" + std::to_string(worker_port), "--secret-file",
                       dir.file("cluster.key"), "--name", "w0", "--threads", "1"},
                      dir.file("worker.log"));
  ASSERT_TRUE(wait_for_port(worker_port, 10000));
  for (bool open : {false, true}) {
    const int port = free_port();
    auto argv = s.serve(dir, port, "127.0.0.1:" + std::to_string(worker_port));
    if (open) {
      write_file(dir.file("public.toml"), "[server]\nstatus_page_public = true\n");
      argv.insert(argv.begin() + 2, {"-c", dir.file("public.toml")});
    }
    ChildProcess serve(argv, dir.file(open ? "serve-public.log" : "serve.log"));
    ASSERT_TRUE(wait_for_port(port, 20000));
    httplib::Client c("127.0.0.1", port);
    auto page = c.Get("/");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
    EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
    auto anonymous = c.Get("/status.json");
    ASSERT_TRUE(anonymous);
    EXPECT_EQ(anonymous->status, open ? 200 : 401) << anonymous->body;
    // The nodes appear once serve has asked the cluster (it listens before that).
    nlohmann::json j;
    for (int i = 0; i < 200; ++i) {
      auto keyed = c.Get("/status.json", {{"Authorization", "Bearer " + s.key}});
      ASSERT_TRUE(keyed);
      ASSERT_EQ(keyed->status, 200) << keyed->body;
      j = nlohmann::json::parse(keyed->body);
      if (j["nodes"].size() >= 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(j["model"], "tiny");
    ASSERT_EQ(j["nodes"].size(), 2u) << j.dump();
    EXPECT_EQ(j["nodes"][1]["name"], "w0");
    serve.signal(SIGTERM);
    EXPECT_NE(serve.wait(30000), -1);
  }
}

}  // namespace
}  // namespace tandem::testing
