// calibrate --from-trace on a real run: `commscope train --trace` over 2 MPI ranks, then the
// profile fitted on its trace predicts the traced iteration and reports the error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

using commscope::testing::run_shell;

class FromTrain : public commscope::testing::TestFolder {};

TEST_F(FromTrain, FitsTheTrainersTraceAndReportsTheError) {
  const std::string dir = (dir_ / "trace").string() + "/";
  const std::string plan =
      " --model gpt2-tiny-cpu --micro-batch-size 2 --global-batch-size 4 --precision fp32";
  auto t = run_shell(std::string(COMMSCOPE_BIN) + " train --ranks 2 --steps 2" + plan +
                     " --trace " + dir);
  ASSERT_EQ(t.status, 0) << t.err;
  const std::string out = (dir_ / "fitted.json").string();
  auto c = run_shell(std::string(COMMSCOPE_BIN) + " calibrate --from-trace " + dir +
                     " --system cpu-host --gpus 2 --nodes 1" + plan + " -o " + out);
  ASSERT_EQ(c.status, 0) << c.err;
  // Two iterations of two ranks; every compute kernel of the trainer is a workload op.
  EXPECT_NE(c.out.find("2 iteration(s), 2 rank(s))"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("matched no op"), std::string::npos) << c.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(c.out, m, std::regex(R"(traced iteration\s+([0-9.]+) s)")))
      << c.out;
  EXPECT_GT(std::stod(m[1]), 0);
  ASSERT_TRUE(std::regex_search(c.out, m, std::regex(R"(predicted iteration\s+([0-9.]+) s)")))
      << c.out;
  EXPECT_GT(std::stod(m[1]), 0);
  ASSERT_TRUE(std::regex_search(c.out, m, std::regex(R"(error ([-+][0-9.]+)%)"))) << c.out;
  EXPECT_TRUE(std::isfinite(std::stod(m[1])));
  // The written preset is one predict reads, with fractions for efficiencies.
  auto j = nlohmann::json::parse(commscope::testing::slurp(out));
  for (const char* k : {"gemm_efficiency", "attention_efficiency", "memory_efficiency"}) {
    EXPECT_GT(j["calibration"][k].get<double>(), 0) << k;
    EXPECT_LE(j["calibration"][k].get<double>(), 1) << k;
  }
  auto p = run_shell(std::string(COMMSCOPE_BIN) + " predict --system " + out +
                     " --gpus 2 --nodes 1" + plan);
  EXPECT_EQ(p.status, 0) << p.err;
}

}  // namespace
