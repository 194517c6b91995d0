// `tandem systemd`: the units generated from the example config, what they must say, that
// systemd-analyze accepts them, and that deploy/ holds exactly what the generator prints.
#include "ops/systemd_units.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tandem::ops {
namespace {

using tandem::testing::run_tandem;
using tandem::testing::ScratchDir;
using tandem::testing::write_file;

const std::string kExample = std::string(TANDEM_SOURCE_DIR) + "/deploy/tandem.example.toml";

config::Config example() {
  auto c = config::load_config(kExample);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return c.value();
}

std::string unit(UnitRole role, const std::string& name = "") {
  UnitOptions o;
  o.role = role;
  o.config_path = "/etc/tandem/tandem.toml";
  o.worker_name = name;
  auto u = make_unit(example(), o);
  EXPECT_TRUE(u.is_ok()) << u.status().to_string();
  return u.is_ok() ? u.value() : "";
}

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(SystemdUnits, HeadIsANotifyServiceWithWatchdogRestartUserAndSandbox) {
  const std::string u = unit(UnitRole::head);
  for (const char* line :
       {"Type=notify", "ExecStart=/usr/local/bin/tandem serve -c /etc/tandem/tandem.toml", "WatchdogSec=60",
        "Restart=on-failure", "RestartPreventExitStatus=2", "User=tandem", "Group=tandem", "NoNewPrivileges=yes",
        "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "StateDirectory=tandem",
        "CapabilityBoundingSet=", "RestrictNamespaces=yes", "TimeoutStartSec=infinity", "WantedBy=multi-user.target",
        // the weight hashes' memo (engine/hash_memo.h): /var/cache/tandem/weight-hashes
        "CacheDirectory=tandem", "Environment=XDG_CACHE_HOME=/var/cache"}) {
    EXPECT_TRUE(has_line(u, line)) << "missing '" << line << "' in\n" << u;
  }
  EXPECT_EQ(u.find("AmbientCapabilities"), std::string::npos) << u;
}

TEST(SystemdUnits, WorkerReadsItsTableAndMayCreateOnlyANetworkNamespace) {
  const std::string u = unit(UnitRole::worker, "box-b");
  // Its settings come from its [[worker]] table at every start (`tandem worker -c`), so an edit
  // of tandem.toml needs no new unit.
  EXPECT_TRUE(has_line(u, "ExecStart=/usr/local/bin/tandem worker -c /etc/tandem/tandem.toml --name box-b")) << u;
  for (const char* line : {"Type=notify", "WatchdogSec=60", "Restart=on-failure", "User=tandem", "NoNewPrivileges=yes",
                           "ProtectSystem=strict", "PrivateTmp=yes", "CacheDirectory=tandem/rpc",
                           "AmbientCapabilities=CAP_SYS_ADMIN CAP_NET_ADMIN",
                           "CapabilityBoundingSet=CAP_SYS_ADMIN CAP_NET_ADMIN", "RestrictNamespaces=net"}) {
    EXPECT_TRUE(has_line(u, line)) << "missing '" << line << "' in\n" << u;
  }
  EXPECT_FALSE(has_line(u, "PrivateNetwork=yes"));
  // The only worker may be left unnamed (the header line then names no worker).
  const std::string unnamed = unit(UnitRole::worker);
  EXPECT_EQ(unnamed.substr(unnamed.find('\n')), u.substr(u.find('\n')));
}

TEST(SystemdUnits, AWorkerNotInTheConfigIsNamedInTheError) {
  UnitOptions o;
  o.role = UnitRole::worker;
  o.config_path = "/etc/tandem/tandem.toml";
  o.worker_name = "box-z";
  auto u = make_unit(example(), o);
  ASSERT_FALSE(u.is_ok());
  EXPECT_NE(u.status().message().find("no [[worker]] named 'box-z'"), std::string::npos) << u.status().message();
  EXPECT_NE(u.status().message().find("box-b"), std::string::npos);
}

TEST(SystemdUnits, PathsUnderAHomeFolderKeepItReadableAndOtherFoldersWritable) {
  config::Config c = example();
  c.model.path = "/home/ops/models/m.gguf";
  c.server.keys_db = "/srv/tandem/keys.db";
  UnitOptions o;
  o.config_path = "/etc/tandem/tandem.toml";
  auto u = make_unit(c, o);
  ASSERT_TRUE(u.is_ok());
  EXPECT_TRUE(has_line(u.value(), "ProtectHome=read-only")) << u.value();
  EXPECT_TRUE(has_line(u.value(), "ReadWritePaths=-/srv/tandem")) << u.value();
}

TEST(SystemdUnits, RelativeConfigPathsAreRefused) {
  UnitOptions o;
  o.config_path = "tandem.toml";
  EXPECT_FALSE(make_unit(example(), o).is_ok());
}

// deploy/ holds the units generated from deploy/tandem.example.toml: they must not drift.
TEST(SystemdUnits, DeployExamplesAreWhatTheCommandPrints) {
  ScratchDir dir;
  for (const auto& [role, file] :
       {std::pair{"head", "tandem-head.service"}, std::pair{"worker", "tandem-worker.service"}}) {
    // The example units name /etc/tandem/tandem.toml: generate from a copy there in spirit, by
    // giving the command the same absolute path through a symlink-free rewrite of the header.
    auto r = run_tandem(std::string("systemd --role ") + role + " -c " + kExample, dir.file(""));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/deploy/" + file);
    std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string got = r.out;
    // Only the config path differs: the source tree's against the installed one.
    for (size_t at; (at = got.find(kExample)) != std::string::npos;)
      got.replace(at, kExample.size(), "/etc/tandem/tandem.toml");
    EXPECT_EQ(got, expected) << "regenerate deploy/" << file << " (docs/deploy.md says how)";
  }
}

TEST(SystemdUnits, SystemdAnalyzeVerifyAcceptsBoth) {
  if (std::system("command -v systemd-analyze >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "systemd-analyze is not installed";
  ScratchDir dir;
  for (UnitRole role : {UnitRole::head, UnitRole::worker}) {
    UnitOptions o;
    o.role = role;
    o.config_path = kExample;
    o.binary = TANDEM_BINARY;  // verify checks that ExecStart's program exists
    auto u = make_unit(example(), o);
    ASSERT_TRUE(u.is_ok());
    const std::string path = dir.file(unit_file_name(role));
    write_file(path, u.value());
    const std::string out = dir.file("verify.txt");
    const int rc = std::system(("systemd-analyze verify --man=no " + path + " >" + out + " 2>&1").c_str());
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Complaints about this machine (no systemd running as PID 1, other units) are not ours.
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) {
      if (l.find(unit_file_name(role)) != std::string::npos) ADD_FAILURE() << l;
    }
    if (rc != 0) std::printf("systemd-analyze verify exited %d:\n%s\n", rc, text.c_str());
  }
}

}  // namespace
}  // namespace tandem::ops
