// The alpha-beta fit recovers known latency and bandwidth from synthetic timings.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "commscope/calib/alpha_beta.h"
#include "commscope/spec/system.h"

namespace commscope {
namespace {

TEST(Fit, RecoversKnownAlphaAndBeta) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noise(-0.005, 0.005);  // +-0.5% timing noise
  for (double alpha : {2e-6, 25e-6, 1e-3}) {
    for (double gbs : {1.0, 12.5, 180.0}) {
      const double beta = 1 / (gbs * 1e9);
      std::vector<Sample> s;
      for (double b = 8; b <= 128.0 * (1 << 20); b *= 2)
        s.push_back({b, (alpha + beta * b) * (1 + noise(rng))});
      auto f = fit_alpha_beta(s);
      ASSERT_TRUE(f.ok()) << f.error().message;
      EXPECT_NEAR(f->alpha / alpha, 1.0, 0.01) << alpha << " " << gbs;
      EXPECT_NEAR(f->beta / beta, 1.0, 0.01) << alpha << " " << gbs;
      EXPECT_GT(f->r2, 0.999);
      EXPECT_NEAR(f->busbw(Collective::all_reduce, 4) / (1.5 / beta), 1.0, 0.01);
    }
  }
}

TEST(Fit, NeedsTwoSizes) {
  EXPECT_FALSE(fit_alpha_beta({{1024, 1e-5}}).ok());
  EXPECT_FALSE(fit_alpha_beta({{1024, 1e-5}, {1024, 2e-5}}).ok());
  EXPECT_FALSE(fit_alpha_beta({{1024, 1e-5}, {2048, 0}}).ok());
}

// Times whose line through them crosses zero above size 0 (the small size rode a shaper's
// burst): the constrained fit puts alpha at 0 and beta at the weighted least-squares slope
// through the origin, sum(w x y) / sum(w x^2) with w = 1/y^2, i.e. mean(x/y) / mean((x/y)^2).
TEST(Fit, NegativeLatencyIsRefittedThroughTheOrigin) {
  const std::vector<Sample> s = {
      {65536, 2e-4}, {262144, 6.0e-2}, {1048576, 2.0e-1}, {4194304, 1.06}};
  double sxy = 0, sxx = 0;
  for (const auto& p : s) {
    const double w = 1 / (p.seconds * p.seconds);
    sxy += w * p.bytes * p.seconds;
    sxx += w * p.bytes * p.bytes;
  }
  auto f = fit_alpha_beta(s);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->clamped);
  EXPECT_EQ(f->alpha, 0);
  EXPECT_DOUBLE_EQ(f->beta, sxy / sxx);
  for (std::size_t i = 0; i < s.size(); ++i)
    EXPECT_DOUBLE_EQ(f->residuals[i], s[i].seconds - f->beta * s[i].bytes);
  // Times that fall with size: beta at 0, alpha at the weighted mean time.
  auto g = fit_alpha_beta({{1024, 2e-5}, {2048, 1e-5}});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->clamped);
  EXPECT_EQ(g->beta, 0);
  EXPECT_DOUBLE_EQ(g->alpha, (1 / 2e-5 + 1 / 1e-5) / (1 / (2e-5 * 2e-5) + 1 / (1e-5 * 1e-5)));
  // A clean sweep is not clamped (RecoversKnownAlphaAndBeta covers its values).
  EXPECT_FALSE(fit_alpha_beta({{1024, 1e-5}, {2048, 1.5e-5}})->clamped);
}

// A sweep of exact alpha + beta x size times.
MeasuredCollective sweep(Collective c, const std::string& group, int ranks, double alpha,
                         double beta) {
  MeasuredCollective m;
  m.collective = c, m.group = group, m.ranks = ranks;
  for (double b = 1024; b <= 64.0 * (1 << 20); b *= 4) m.samples.push_back({b, alpha + beta * b});
  return m;
}

// The profile comes from the inter-node all-reduce even when a world or intra-node one has more
// ranks; its rate is the ring all-reduce bus bandwidth 2(n-1)/n / beta per NIC, its latency alpha
// over the ring's 2(n-1) steps; and the loader predict uses reads it back.
TEST(Profile, FromTheInterNodeAllReduce) {
  const double alpha = 40e-6, beta = 1 / 5e9;  // 5 GB/s algorithm bandwidth
  const std::vector<MeasuredCollective> m = {
      sweep(Collective::all_reduce, "world", 16, 1e-6, 1 / 50e9),
      sweep(Collective::all_reduce, "inter-node", 4, alpha, beta),
      sweep(Collective::all_gather, "inter-node", 4, alpha, beta / 2),
      sweep(Collective::all_reduce, "intra-node", 8, 1e-6, 1 / 90e9)};
  const BenchFits fits = fit_bench(m);
  ASSERT_EQ(fits.rows.size(), 4u);
  ASSERT_EQ(fits.profile_row, 1);
  ProfileOptions o;
  o.transport = "rdma";
  o.nics_per_node = 2;
  auto p = network_profile(fits, o);
  ASSERT_TRUE(p.ok()) << p.error().message;
  const double gbps = 2.0 * 3 / 4 / beta * 8 / 1e9 / 2;
  EXPECT_NEAR((*p)["achievable_gbps"].get<double>() / gbps, 1, 1e-6);
  EXPECT_NEAR((*p)["latency_us"].get<double>() / (alpha * 1e6 / 6), 1, 1e-6);
  EXPECT_EQ((*p)["transport"], "rdma");
  auto back = network_from_json(*p, "test");
  ASSERT_TRUE(back.ok()) << back.error().message;
  // Without an inter-node group: the all-reduce over the most ranks.
  EXPECT_EQ(fit_bench({m[0], m[2], m[3]}).profile_row, 0);
  // No all-reduce: no profile, and the error names --output.
  auto none = network_profile(fit_bench({m[2]}), ProfileOptions{});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("--output"), std::string::npos);
}

TEST(Profile, BadOptionsAreRefusedNamingTheFlag) {
  const auto fits = fit_bench({sweep(Collective::all_reduce, "world", 4, 1e-5, 1e-9)});
  auto refused = [&](const ProfileOptions& o, const std::string& flag) {
    Status s = check_profile_options(o);
    ASSERT_FALSE(s.ok()) << flag;
    EXPECT_NE(s.error().message.find(flag), std::string::npos) << s.error().message;
    EXPECT_FALSE(network_profile(fits, o).ok()) << flag;
  };
  ProfileOptions o;
  o.transport = "foo";
  refused(o, "--transport");
  for (double bad : {std::nan(""), -1.0, 0.0, HUGE_VAL}) {
    ProfileOptions l;
    l.line_rate_gbps = bad;
    refused(l, "--line-rate-gbps");
  }
  ProfileOptions n;
  n.nics_per_node = 0;
  refused(n, "--nics-per-node");
  ProfileOptions e;
  e.name = "";
  refused(e, "--name");
  for (const char* t : {"tcp", "ipoib", "rdma", "roce", "slingshot"}) {
    ProfileOptions ok;
    ok.transport = t;
    EXPECT_TRUE(check_profile_options(ok).ok()) << t;
    EXPECT_TRUE(network_profile(fits, ok).ok()) << t;
  }
}

// `commscope fit` end to end: bad flags fail before anything is written; -o into a missing
// folder creates it, and predict --network reads the profile.
// commscope-bench JSON with a field of the wrong type or out of range is one error naming the
// result and the field (found by probing, 2026-11-30: the JSON library's own exception came out
// as an internal error, and ranks 2^40 was reported as 'ranks 0').
TEST(FitCli, BenchJsonFieldsAreCheckedByTypeAndRange) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("commscope_fit_types_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto good = [](double b) {
    return nlohmann::json{{"collective", "all_reduce"},
                          {"ranks", 4},
                          {"size_bytes", b},
                          {"out_of_place", {{"time_us", 10 + b / 1e4}}}};
  };
  struct Case {
    nlohmann::json first;
    std::string expected;
  };
  nlohmann::json ranks_text = good(1024), ranks_big = good(1024), time_text = good(1024),
                 oop_number = good(1024), group_number = good(1024), name_number = good(1024),
                 bytes_negative = good(1024), bytes_missing = good(1024), time_tiny = good(1024);
  ranks_text["ranks"] = "4";
  ranks_big["ranks"] = std::int64_t{1} << 40;
  time_text["out_of_place"]["time_us"] = "10";
  oop_number["out_of_place"] = 3;
  group_number["group"] = 7;
  name_number["collective"] = 1;
  bytes_negative["size_bytes"] = -5;
  // Found by probing, 2026-11-30: a result without its size was dropped silently, and a time of
  // 1e-9 us outweighed the other 17 sizes until the fit said "expected two or more sizes".
  bytes_missing.erase("size_bytes");
  time_tiny["out_of_place"]["time_us"] = 1e-9;
  for (const Case& c : {Case{1, "results[0]: expected an object, got 1"},
                        Case{ranks_text, "results[0].ranks: expected an integer from 1 to"},
                        Case{ranks_big,
                             "results[0].ranks: expected an integer from 1 to 1048576, "
                             "got 1099511627776"},
                        Case{time_text, "results[0].out_of_place.time_us: expected a time"},
                        Case{oop_number, "results[0].out_of_place.time_us: expected a time"},
                        Case{group_number, "results[0].group: expected a string, got 7"},
                        Case{name_number, "results[0].collective: expected a collective's name"},
                        Case{bytes_negative, "results[0].size_bytes: expected a byte count"},
                        Case{bytes_missing,
                             "results[0].size_bytes: expected a byte count from 0 "
                             "to 1e15, got nothing"},
                        Case{time_tiny,
                             "results[0].out_of_place.time_us: expected a time in "
                             "microseconds from 0.001 to 1e12"}}) {
    SCOPED_TRACE(c.expected);
    nlohmann::json results = nlohmann::json::array({c.first});
    for (double b = 2048; b <= 1 << 20; b *= 2) results.push_back(good(b));
    const fs::path file = dir / "bench.json";
    std::ofstream(file) << nlohmann::json{{"results", results}}.dump();
    auto r = read_bench_json(file.string());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(c.expected), std::string::npos) << r.error().message;
  }
  fs::remove_all(dir);
}

TEST(FitCli, FlagsAndOutputFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("commscope_fit_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json results = nlohmann::json::array();
  for (double b = 1024; b <= 16.0 * (1 << 20); b *= 4)
    results.push_back({{"collective", "all_reduce"},
                       {"ranks", 4},
                       {"size_bytes", b},
                       {"out_of_place", {{"time_us", 30 + b / 2e3}}}});
  std::ofstream(dir / "bench.json") << nlohmann::json{{"results", results}}.dump();
  auto run = [&](const std::string& args) {
    const std::string cmd = std::string(COMMSCOPE_BIN) + " " + args + " >/dev/null 2>" +
                            (dir / "err").string() + " </dev/null";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const std::string in = (dir / "bench.json").string();
  const std::string out = (dir / "presets-mine" / "x.json").string();
  for (const std::string bad :
       {"--transport foo", "--line-rate-gbps nan", "--line-rate-gbps -3", "--nics-per-node 0"}) {
    EXPECT_EQ(run("fit " + in + " -o " + out + " " + bad), 2) << bad;
    std::ifstream err(dir / "err");
    std::string line, more;
    std::getline(err, line);
    EXPECT_FALSE(std::getline(err, more)) << "one line: " << line << " / " << more;
    EXPECT_NE(line.find(bad.substr(0, bad.find(' '))), std::string::npos) << line;
    EXPECT_FALSE(fs::exists(dir / "presets-mine")) << bad;
  }
  EXPECT_EQ(run("fit " + in + " --transport foo"), 2) << "checked without -o too";
  ASSERT_EQ(run("fit " + in + " -o " + out + " --transport roce --line-rate-gbps 100"), 0);
  EXPECT_EQ(run("predict --network " + out), 0);
  // Nothing to fit is a failure, not an empty table with status 0 (found by probing,
  // 2026-11-30).
  std::ofstream(dir / "empty.json") << R"({"results": []})";
  EXPECT_EQ(run("fit " + (dir / "empty.json").string()), 2);
  std::ifstream err(dir / "err");
  std::string line;
  std::getline(err, line);
  EXPECT_NE(line.find("fit: expected a collective measured at two or more sizes"),
            std::string::npos)
      << line;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace commscope
