// The worker threads of kiln's HTTP servers (`kiln serve`, `kiln dashboard`): cpp-httplib's
// Server::new_task_queue, in place of httplib's own ThreadPool.
//
// Why not httplib::ThreadPool: PyPI's libtorch_cpu carries a copy of cpp-httplib of another version
// and exports the vtable of its ThreadPool worker thread (std::thread::_State_impl<...worker>). In
// a process that has loaded LibTorch, a ThreadPool built here starts threads that run that copy's
// worker over this version's ThreadPool, and the server never answers. The types below are kiln's
// own, so nothing of theirs can be bound to LibTorch's copy.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace kiln {

class HttpThreadPool : public httplib::TaskQueue {
 public:
  // `on_start` runs once on each thread before its first job (e.g. to lower its priority).
  explicit HttpThreadPool(size_t threads, std::function<void()> on_start = nullptr) {
    for (size_t i = 0; i < threads; ++i) {
      threads_.emplace_back([this, on_start] {
        if (on_start) on_start();
        Work();
      });
    }
  }
  HttpThreadPool(const HttpThreadPool&) = delete;
  HttpThreadPool& operator=(const HttpThreadPool&) = delete;
  ~HttpThreadPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

  // Runs the queued jobs, then joins the threads.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln
