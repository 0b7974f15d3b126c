// The trainer's communication stream: tasks run in submission order on one other thread, and
// wait(ticket) returns only after that task (and every earlier one) has finished.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "../../src/trainer/comm_stream.h"

namespace {

TEST(CommStream, RunsInOrderOnAnotherThreadAndWaitsForTickets) {
  commscope::train::CommStream stream;
  std::vector<int> order;
  std::atomic<bool> release{false};
  const auto main_id = std::this_thread::get_id();
  std::thread::id worker_id;
  // The first task blocks until released: later tasks must queue behind it.
  const auto t1 = stream.submit([&] {
    worker_id = std::this_thread::get_id();
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    order.push_back(1);
  });
  const auto t2 = stream.submit([&] { order.push_back(2); });
  const auto t3 = stream.submit([&] { order.push_back(3); });
  EXPECT_EQ(t1 + 1, t2);
  EXPECT_EQ(t2 + 1, t3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(order.empty());  // the main thread went on while the stream was busy
  release = true;
  stream.wait(t2);
  ASSERT_GE(order.size(), 2u);
  EXPECT_EQ(order[0], 1);
  EXPECT_EQ(order[1], 2);
  stream.drain();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_NE(worker_id, main_id);
  stream.wait(0);  // ticket 0: nothing to wait for
}

TEST(CommStream, PartitionTilesTheBufferFirstRanksTakeTheRemainder) {
  const commscope::train::Partition p{10, 4};  // 3, 3, 2, 2
  EXPECT_EQ(p.lo(0), 0);
  EXPECT_EQ(p.hi(0), 3);
  EXPECT_EQ(p.hi(1), 6);
  EXPECT_EQ(p.hi(2), 8);
  EXPECT_EQ(p.hi(3), 10);
  const commscope::train::Partition q{3, 4};  // 1, 1, 1, 0
  EXPECT_EQ(q.hi(2), 3);
  EXPECT_EQ(q.lo(3), q.hi(3));
}

}  // namespace
