// Unit files for systemd, generated from tandem.toml (`tandem systemd`): the head runs
// `tandem serve`, each worker `tandem worker` with the flags its [[worker]] table implies.
//
// Both are Type=notify (READY after the first canary on the head, after the listener is up on a
// worker), with a watchdog the daemon pings at half of WatchdogSec, Restart=on-failure (never for
// exit status 2, a bad flag or config, which a restart does not heal), a dedicated user, and
// systemd's sandboxing: the file system read-only but for the state and cache folders the config
// names, a private /tmp, no home folders, no new privileges. A worker keeps exactly the two
// capabilities it needs to put its ggml RPC server in a private network namespace
// (CAP_SYS_ADMIN for unshare/setns, CAP_NET_ADMIN to bring up that namespace's loopback), and may
// create network namespaces and no other kind.
#pragma once

#include <string>

#include "common/status.h"
#include "config/config.h"

namespace tandem::ops {

enum class UnitRole { head, worker };

struct UnitOptions {
  UnitRole role = UnitRole::head;
  std::string config_path;  // tandem.toml as the unit will read it (made absolute)
  std::string worker_name;  // role worker: which [[worker]]; "" = the only one
  std::string binary = "/usr/local/bin/tandem";
  std::string user = "tandem";
  int watchdog_s = 60;
};

// The unit's text. Errors: a worker name that is not in the config (or none given with several
// workers), a relative path, a role worker without a secret file.
Result<std::string> make_unit(const config::Config& config, const UnitOptions& options);

// "tandem-head.service" or "tandem-worker.service".
std::string unit_file_name(UnitRole role);

}  // namespace tandem::ops
