// Child processes for multi-process tests: started with a clean argv, stopped on destruction.
#pragma once

#include <string>
#include <vector>

namespace tandem::testing {

class ChildProcess {
 public:
  // Starts `argv` with stdout and stderr appended to `log_path`. Check running() afterwards.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path);
  ~ChildProcess();  // SIGTERM, then SIGKILL after 5 s
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  int pid() const { return pid_; }
  bool running();
  // Sends `signal`; returns false when the process is gone.
  bool signal(int signal);
  // Waits up to `timeout_ms` for exit; returns the exit status (or 128+signal), -1 on timeout.
  int wait(int timeout_ms);

 private:
  int pid_ = -1;
  int status_ = -1;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// Waits until something accepts TCP connections on 127.0.0.1:`port`; false after `timeout_ms`.
bool wait_for_port(int port, int timeout_ms);

}  // namespace tandem::testing
