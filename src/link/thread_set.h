// Threads of a long-running server, one per connection: finished ones are joined as new ones start,
// so a daemon that serves connections for months does not pile up dead threads (each keeps its
// stack until joined).
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

namespace tandem::link {

// Thread-safe.
class ThreadSet {
 public:
  ~ThreadSet() { join_all(); }

  // Joins the threads that have finished, then starts `fn` on a new thread.
  void spawn(std::function<void()> fn);
  // Joins every thread (callers first make them finish, e.g. by shutting their sockets down).
  void join_all();

 private:
  struct Entry {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mutex_;
  std::list<Entry> threads_;  // guarded by mutex_
};

}  // namespace tandem::link
