// The supervisor of `tandem serve`: one forwarder per worker, the engine child process, the
// connection to it, and the cluster's health.
//
// It never exits because of a failure elsewhere. A worker whose heartbeat stops is declared lost:
// the engine (whose ggml RPC client would abort or hang) is killed, requests in flight end with an
// error, the state turns degraded. When every worker is back the engine restarts, with backoff,
// loads, and only a real one-token generation through the whole split (the canary) makes the
// state ready again. While idle the canary repeats; a failed canary turns the state degraded.
// A worker that serves another head is not fought over: the engine waits, the node shows
// `refused` with the worker's reason, and it starts once the worker is free.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/progress.h"
#include "engine/launch.h"
#include "gateway/api_server.h"
#include "gateway/engine_backend.h"
#include "gateway/serve_state.h"
#include "link/forwarder.h"
#include "link/secret.h"

namespace tandem::gateway {

struct WorkerLink {
  std::string name;
  link::Endpoint address;
};

struct SupervisorOptions {
  std::string engine_program;          // path of tandem-engine
  std::string model;                   // GGUF path
  std::string model_id;                // the name clients use
  std::vector<WorkerLink> workers;     // in layer order
  std::optional<link::Secret> secret;  // required when there are workers
  std::string head_name = "head";
  int cpu_layers = 0;  // the plan's split (see engine::Placement)
  std::vector<int> device_layers;
  bool workers_first = false;   // RPC devices before the head's GPUs
  bool ffn_tensor = false;      // every layer on every device, the FFNs split (parallelism ffn-tensor)
  int context = 4096;           // per slot
  std::string kv_type = "f16";  // the KV cache's type, as planned
  int parallel = 1;
  int threads = 0;
  bool cuda_graphs = true;
  // false: the engine reads the model file rather than map it (--no-mmap)
  bool mmap = true;
  uint64_t prompt_cache = 0;     // bytes of prompt-cache states on each node; 0: off
  std::string prompt_cache_dir;  // and the folder for those memory no longer holds ("" = none)
  uint64_t prompt_cache_dir_size = 0;
  std::string speculative = "off";  // speculative decoding: off, ngram or draft
  std::string draft_model;          // the draft's GGUF ("draft")
  int draft_max = 8;
  double spec_synth_len = 0;              // benchmarks only (engine/speculation.h)
  bool backtraces = false;                // let ggml print gdb backtraces when the engine aborts
  std::vector<std::string> engine_flags;  // appended to the engine's command line as they are
  std::string runtime_dir;                // for the engine's socket; "" = a fresh folder in /tmp
  std::chrono::seconds canary_interval{30};
  std::chrono::seconds canary_timeout{60};
  std::chrono::milliseconds heartbeat_deadline{5000};
  // Before the engine starts again (not the first time): "" when the memory the plan needs is free
  // on every node, else which device is short and what holds memory there (restart_memory.h); the
  // restart waits meanwhile. May be empty: no check.
  std::function<std::string()> memory_check;
  std::function<void(const std::string&)> log;  // one line per event; may be empty
  bool progress_tty = false;                    // draw the load progress as a bar (else log lines)
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();  // stop()

  // Starts the forwarders and the supervision thread (which starts the engine).
  Status start();
  // Stops the engine (SIGTERM, then SIGKILL after 10 s) and the forwarders.
  void stop();

  Backend* backend() { return &backend_; }
  // The report /health and the front end use; thread-safe.
  HealthReport health();
  // Called by the supervision thread to know whether the front end is idle (for the canary).
  void set_busy_probe(std::function<int()> in_flight) { in_flight_ = std::move(in_flight); }
  // The state for systemd and logs ("loading 41%", "ready", ...).
  std::string state();

 private:
  using Clock = std::chrono::steady_clock;

  // The state machine (supervisor.cpp).
  void loop();
  void tick();
  // A worker's heartbeat stopped: the engine (whose RPC client would abort or hang) goes.
  void on_links_down(int pid);
  // The engine failed to load or the canary found it hung: restarts it with backoff (true).
  bool restart_failed_engine();
  void set_state(ServeState state, const std::string& why);
  void log(const std::string& line);
  void poll_engine();  // asks the engine for its status every second, so /health stays live
  bool all_links_up();
  // The workers (supervisor_workers.cpp).
  // True when no worker serves another head; otherwise records which do (health shows them
  // `refused`), logs each change once, and the engine waits for them.
  bool workers_free();
  // True before the first start, and when options_.memory_check finds the memory free; otherwise
  // records why (health shows it), logs it, and the restart waits.
  bool memory_free();
  // Asks each worker for its cache listing and writes it beside the engine's socket: the
  // engine's --worker-cache listings (none for a worker without cache or answer).
  std::vector<engine::WorkerCacheListing> cache_listings();
  // The engine child (supervisor_engine.cpp).
  // The engine's arguments for the next start (asks the workers for their cache listings).
  engine::EngineLaunch engine_launch();
  void spawn_engine();
  void connect_engine();
  void reap_engine();  // an engine that ended by itself: restart with backoff
  void kill_engine(const std::string& why, bool backoff = false);
  // The canary (supervisor_canary.cpp).
  bool canary_due();  // true: marks a canary running
  void run_canary();  // on its own thread
  void start_canary();

  const SupervisorOptions options_;
  EngineBackend backend_;
  std::vector<std::unique_ptr<link::Forwarder>> forwarders_;  // constant after start()
  std::function<int()> in_flight_;
  std::thread thread_;
  std::thread poll_thread_;
  std::thread canary_thread_;  // touched only by the supervision thread and stop()
  std::atomic<bool> stop_{false};
  std::string socket_path_;  // constant after start()

  std::mutex mutex_;
  // All below guarded by mutex_.
  ServeState state_ = ServeState::starting;
  std::string last_error_;
  int engine_pid_ = -1;
  bool engine_connected_ = false;
  engine::EngineStatus engine_status_;
  bool canary_running_ = false;
  bool engine_verified_ = false;  // this engine instance has passed a canary
  bool kill_requested_ = false;   // the canary found the engine hung
  Clock::time_point last_canary_{}, restart_at_{}, engine_started_{};
  std::chrono::seconds backoff_{1};
  int restarts_ = 0;
  uint64_t canary_seq_ = 0;
  std::unique_ptr<ProgressMeter> meter_;
  std::map<std::string, std::string> refused_;  // worker name -> why it refuses us (another head)
  std::string memory_short_;                    // why the last memory check held the restart back
  Clock::time_point memory_logged_{};
};

}  // namespace tandem::gateway
