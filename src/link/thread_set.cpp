#include "link/thread_set.h"

namespace tandem::link {

void ThreadSet::spawn(std::function<void()> fn) {
  std::list<Entry> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      auto next = std::next(it);
      if (it->done->load()) finished.splice(finished.end(), threads_, it);
      it = next;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    threads_.push_back({std::thread([fn = std::move(fn), done] {
                          fn();
                          done->store(true);
                        }),
                        done});
  }
  for (auto& e : finished) e.thread.join();
}

void ThreadSet::join_all() {
  std::list<Entry> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(threads_);
  }
  for (auto& e : all) e.thread.join();
}

}  // namespace tandem::link
