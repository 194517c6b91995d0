// EngineClient: the gateway's (and the tests') side of the engine protocol over a Unix socket.
//
// Thread-safety: every method may be called from any thread. Callbacks run on the client's reader
// thread, one at a time, in the order the engine sent the events; they must not block and must
// not destroy the client. Each submit's callback gets a started event, its deltas and then exactly
// one done or error event, also when the engine goes away (error `unavailable`) or the client is destroyed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "engine/protocol.h"

namespace tandem::engine {

class EngineClient {
 public:
  using EventCallback = std::function<void(const EngineEvent&)>;
  using StatusCallback = std::function<void(const EngineStatus&)>;

  // Connects to the engine at `socket_path`, retrying for up to `timeout_ms` (it may be starting).
  // `on_status`, when given, receives every status event, the unsolicited load progress included.
  static Result<std::unique_ptr<EngineClient>> connect(const std::string& socket_path, int timeout_ms,
                                                       StatusCallback on_status = nullptr);
  ~EngineClient();  // closes; requests still open get an `unavailable` error
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  // Sends a request; `body` is the OpenAI request (serialized JSON). Fails when the id is in use
  // on this client or the engine is gone; validation errors arrive as an error event.
  Status submit(const std::string& id, RequestKind kind, const std::string& body, EventCallback on_event);
  // Asks the engine to cancel `id`; its callback then gets an error event with code cancelled
  // (or its done event, when it finished first).
  Status cancel(const std::string& id);
  // Sends a tokenize, detokenize or count request (its id is chosen here) and waits up to
  // `timeout_ms` for the answer: the `result` event, or the engine's error as a Status.
  Result<EngineEvent> query(EngineRequest request, int timeout_ms);
  // Asks for the engine's status and waits for the answer up to `timeout_ms`.
  Result<EngineStatus> status(int timeout_ms);
  // Sends one raw line (tests: malformed input must not hurt the engine).
  Status send_raw(const std::string& line);
  // Errors about lines that named no request (malformed lines) arrive here; may be empty.
  void on_orphan_error(EventCallback cb);

  bool connected() const { return !closed_; }

 private:
  explicit EngineClient(int fd, StatusCallback on_status);
  void read_loop();
  void dispatch(const EngineEvent& e);
  void fail_all(const std::string& why);
  Status send_line(const std::string& line);

  const int fd_;
  const StatusCallback on_status_;
  std::atomic<bool> closed_{false};
  std::mutex write_mutex_;  // one writer at a time on the socket

  std::mutex mutex_;
  std::condition_variable status_cv_;
  std::map<std::string, std::shared_ptr<EventCallback>> open_;  // guarded by mutex_
  EventCallback orphan_;                                        // guarded by mutex_
  uint64_t status_seen_ = 0;                                    // guarded by mutex_: status events received
  uint64_t next_query_ = 0;                                     // guarded by mutex_
  EngineStatus last_status_;                                    // guarded by mutex_

  std::thread reader_;  // last: started when everything above exists
};

}  // namespace tandem::engine
