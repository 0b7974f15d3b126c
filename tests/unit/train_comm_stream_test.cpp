// The trainer's communication stream: tasks run in submission order on one other thread, and
// wait(ticket) returns only after that task (and every earlier one) has finished.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "../../src/train/comm_stream.h"

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
  // owner() in constant time agrees with the ranges, element by element.
  for (const auto& part :
       {p, q, commscope::train::Partition{17, 5}, commscope::train::Partition{20, 4}})
    for (std::int64_t i = 0; i < part.total; ++i) {
      const int r = part.owner(i);
      EXPECT_GE(i, part.lo(r));
      EXPECT_LT(i, part.hi(r));
    }
  // A range [4, 9) of p: rank 1 owns 4..5 (2 elements at 0), rank 2 6..7 (2 at 2), rank 3 8 (1 at
  // 4).
  const auto pieces = p.pieces(4, 5);
  EXPECT_EQ(pieces.counts, (std::vector<int>{0, 2, 2, 1}));
  EXPECT_EQ(pieces.displs[1], 0);
  EXPECT_EQ(pieces.displs[2], 2);
  EXPECT_EQ(pieces.displs[3], 4);
  EXPECT_EQ(p.in_shard(1, 4), 1);  // element 4 is the second of rank 1's [3, 6)
  EXPECT_EQ(p.in_shard(2, 4), 0);
}

}  // namespace
