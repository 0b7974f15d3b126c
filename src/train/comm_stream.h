// The trainer's communication stream (internal to src/train).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "commscope/comm/partition.h"

namespace commscope::train {

// One worker thread running tasks (MPI calls) in the order they were submitted, as NCCL's
// communication stream runs kernels: the main thread submits and goes on computing, and waits
// for a ticket only when it needs that result.
class CommStream {
 public:
  CommStream() : worker_([this] { loop(); }) {}
  ~CommStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  std::uint64_t submit(std::function<void()> task) {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(task));
    cv_.notify_all();
    return ++submitted_;
  }
  void wait(std::uint64_t ticket) {
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return done_ >= ticket; });
  }
  void drain() { wait(submitted()); }
  std::uint64_t submitted() {
    std::lock_guard<std::mutex> l(mu_);
    return submitted_;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return quit_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
      {
        std::lock_guard<std::mutex> l(mu_);
        ++done_;
      }
      done_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t submitted_ = 0, done_ = 0;
  bool quit_ = false;
  std::thread worker_;
};

// ZeRO's partitions of the flat buffer.
using comm::Partition;

}  // namespace commscope::train
