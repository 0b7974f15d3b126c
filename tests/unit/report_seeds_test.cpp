// The seed studies as a scenario: it loads and runs; every headline's predicted figure is an
// independent recomputation from the rows (never from the seeds' numbers); the protocol presets
// equal what data/seeds/protocols.csv says they were derived from; bad input is refused.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "commscope/cost/collective.h"
#include "commscope/report/seeds.h"
#include "commscope/spec/system.h"
#include "commscope/util/units.h"
#include "test_util.h"

using namespace commscope;

namespace {

// The scenario and its predictions, computed once for the whole file.
const SeedsResult& seeds() {
  static const SeedsResult r = [] {
    auto s = load_seeds_scenario("seeds");
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    auto p = predict_seeds(*s);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
    return *p;
  }();
  return r;
}

const SeedComparison& comparison(const std::string& id) {
  for (const auto& c : seeds().comparisons)
    if (c.headline.id == id) return c;
  ADD_FAILURE() << "no headline " << id;
  static SeedComparison none;
  return none;
}

std::vector<const PredictRow*> rows_of(const std::set<std::string>& groups) {
  std::vector<const PredictRow*> out;
  const auto& r = seeds();
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (groups.count(r.row_group[i])) out.push_back(&r.rows[i]);
  return out;
}

// RFC 4180 without embedded newlines: fields split on commas outside quotes, "" is a quote.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        f.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      f.emplace_back();
    } else {
      f.back() += c;
    }
  }
  return f;
}

}  // namespace

TEST(Seeds, ScenarioLoadsAndRuns) {
  const auto t0 = std::chrono::steady_clock::now();
  auto s = load_seeds_scenario("seeds");
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto r = predict_seeds(*s);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("seeds scenario: %zu runs, %zu headlines in %.3f s\n", r->rows.size(),
              r->comparisons.size(), secs);  // reported, never asserted (the machine is shared)
  EXPECT_EQ(r->rows.size(), s->runs.size());
  EXPECT_EQ(r->row_group.size(), r->rows.size());
  EXPECT_EQ(r->comparisons.size(), s->headlines.size());
  // The three studies' settings: four models on the UC Merced cluster over three networks, the
  // Megatron GPTs up to 18.4B on Polaris up to 512 GPUs and on ThetaGPU up to 64.
  std::set<std::string> networks, models;
  int polaris_max = 0, theta_max = 0;
  for (const auto& row : r->rows) {
    if (row.scenario.system.name == "ucmerced-a100-pcie") {
      networks.insert(row.scenario.network.name);
      models.insert(row.scenario.model.name);
      EXPECT_EQ(row.scenario.gpus_per_node, 2);
    }
    if (row.scenario.system.name == "polaris")
      polaris_max = std::max(polaris_max, row.scenario.gpus());
    if (row.scenario.system.name == "thetagpu-tg40")
      theta_max = std::max(theta_max, row.scenario.gpus());
  }
  EXPECT_EQ(networks, (std::set<std::string>{"tcp-10g", "ipoib-100g", "rdma-100g"}));
  EXPECT_EQ(models, (std::set<std::string>{"gpt2-medium", "gpt2-large", "bert-large", "t5-large"}));
  EXPECT_EQ(polaris_max, 512);
  EXPECT_EQ(theta_max, 64);
}

TEST(Seeds, SpeedupsAreMeanRatiosOfMatchedIterationTimes) {
  // Recomputed here from the rows: for every (group, model, nodes, PP) with both networks, the
  // baseline's iteration time over the faster network's; the mean over those pairs.
  struct Case {
    const char* id;
    std::set<std::string> groups;
    const char *net, *base;
  };
  const Case cases[] = {
      {"dp-rdma-vs-ipoib", {"micro-dp"}, "rdma-100g", "ipoib-100g"},
      {"dp-rdma-vs-tcp", {"micro-dp"}, "rdma-100g", "tcp-10g"},
      {"mp-rdma-vs-ipoib", {"micro-mp", "micro-mp-gpt2-large"}, "rdma-100g", "ipoib-100g"},
      {"mp-rdma-vs-tcp", {"micro-mp", "micro-mp-gpt2-large"}, "rdma-100g", "tcp-10g"},
  };
  for (const auto& k : cases) {
    std::map<std::string, double> fast, slow;
    const auto& r = seeds();
    for (std::size_t i = 0; i < r.rows.size(); ++i) {
      if (!k.groups.count(r.row_group[i]) || !r.rows[i].fits) continue;
      const Scenario& s = r.rows[i].scenario;
      const std::string key = r.row_group[i] + "/" + s.model.name + "/" + std::to_string(s.nodes) +
                              "/" + std::to_string(s.plan.pp);
      if (s.network.name == k.net) fast[key] = r.rows[i].iteration_time;
      if (s.network.name == k.base) slow[key] = r.rows[i].iteration_time;
    }
    double sum = 0;
    int n = 0;
    for (const auto& [key, t] : fast)
      if (slow.count(key)) {
        sum += slow[key] / t;
        ++n;
      }
    ASSERT_GT(n, 0) << k.id;
    const SeedComparison& c = comparison(k.id);
    EXPECT_EQ(c.basis, static_cast<std::size_t>(n)) << k.id;
    EXPECT_NEAR(c.predicted, sum / n, 1e-12 * sum / n) << k.id;
    EXPECT_DOUBLE_EQ(c.difference, c.predicted - c.headline.seed) << k.id;
    // RDMA is faster than both on every pair, so the mean gain exceeds 1.
    EXPECT_GT(c.predicted, 1.0) << k.id;
  }
}

TEST(Seeds, SharesAreTheHighestShareOfTheRows) {
  double dp = 0, mp = 0;
  for (const PredictRow* r : rows_of({"micro-dp"}))
    if (r->fits)
      dp = std::max(dp, 100 *
                            std::max(r->breakdown.by_collective[Collective::all_reduce].total,
                                     r->breakdown.by_collective[Collective::all_reduce].profiler) /
                            r->iteration_time);
  for (const PredictRow* r : rows_of({"micro-mp", "micro-mp-gpt2-large"}))
    if (r->fits) {
      const auto& b = r->breakdown;
      const double recv = std::max(b.by_collective[Collective::recv].total,
                                   b.by_collective[Collective::recv].profiler);
      const double emb = std::max(b.by_group[CommGroup::embedding].total,
                                  b.by_group[CommGroup::embedding].profiler);
      mp = std::max(mp, 100 * (recv + emb) / r->iteration_time);
    }
  EXPECT_NEAR(comparison("dp-allreduce-share").predicted, dp, 1e-9);
  EXPECT_NEAR(comparison("mp-recv-embedding-share").predicted, mp, 1e-9);
  EXPECT_GT(dp, 0);
  EXPECT_LE(dp, 100 + 1e-9);
  EXPECT_GT(mp, 0);
}

TEST(Seeds, LowBandwidthSystemRatiosComeFromMatchedRows) {
  // Polaris against ThetaGPU TG40 at the same model, GPU count and ZeRO stage, both fitting.
  std::map<std::string, const PredictRow*> theta;
  for (const PredictRow* r : rows_of({"sigmetrics-thetagpu"}))
    if (r->fits)
      theta[r->scenario.model.name + "/" + std::to_string(r->scenario.gpus()) + "/" +
            std::to_string(r->scenario.plan.zero)] = r;
  double comm = 0, loss = 0;
  int pairs = 0;
  for (const PredictRow* r : rows_of({"sigmetrics-polaris"})) {
    if (!r->fits) continue;
    auto it = theta.find(r->scenario.model.name + "/" + std::to_string(r->scenario.gpus()) + "/" +
                         std::to_string(r->scenario.plan.zero));
    if (it == theta.end()) continue;
    ++pairs;
    comm = std::max(comm, r->breakdown.comm / it->second->breakdown.comm);
    loss = std::max(loss, 100 * (1 - r->tokens_per_s / it->second->tokens_per_s));
  }
  ASSERT_GT(pairs, 0);
  EXPECT_EQ(comparison("lowbw-comm-time").basis, static_cast<std::size_t>(pairs));
  EXPECT_NEAR(comparison("lowbw-comm-time").predicted, comm, 1e-12 * comm);
  EXPECT_NEAR(comparison("lowbw-throughput").predicted, loss, 1e-9);
  // Polaris has a quarter of TG40's NIC bandwidth per GPU: communication takes longer there.
  EXPECT_GT(comm, 1.0);
  EXPECT_GT(loss, 0.0);
}

TEST(Seeds, PeakRateIsTheFastestBucketAndBoundedByThePreset) {
  for (const char* net : {"tcp-10g", "ipoib-100g", "rdma-100g"}) {
    double best = 0;
    for (const PredictRow* r : rows_of({"micro-dp"})) {
      if (r->scenario.network.name != net || !r->fits) continue;
      const double v = bucket_nic_rate_gbps(*r);
      // Never faster than the preset's one-stream rate per NIC.
      EXPECT_LE(v, units::to_gbit_per_s(r->scenario.network.achievable) * (1 + 1e-12)) << net;
      // Independently: the bucket's all-reduce time from the cost model, priced as a ring
      // (or a curve, priced as one) over the group's n ranks, and the bytes a ring carries
      // over each node boundary, 2 (n - 1) / n of the bucket (the NCCL ring's bus factor). It
      // counted 2 (N - 1) / N over the N nodes, 7% low at 16 ranks on 8 nodes (found by
      // checking, 2026-12-02).
      const GroupPlacement g = place_group(r->scenario, CommGroup::data);
      const double bucket = r->scenario.plan.ddp_bucket.value();
      const CollectiveCost cost =
          collective_cost(Collective::all_reduce, bucket, g, link_model(r->scenario));
      ASSERT_TRUE(cost.source == CostSource::curve || cost.algorithm == CollectiveAlgorithm::ring)
          << cost_path(cost);
      const double t = cost.time.value();
      const double n = g.size;
      ASSERT_GT(g.nodes, 1);
      ASSERT_GT(n, g.nodes);  // more ranks than nodes: the two counts differ
      const double expect =
          2 * (n - 1) / n * bucket * g.concurrent * 8 / t / r->scenario.system.nics.count / 1e9;
      EXPECT_NEAR(v, expect, 1e-9 * expect) << net;
      best = std::max(best, v);
    }
    const std::string id =
        std::string("peak-rate-") + (net == std::string("tcp-10g")      ? "tcp"
                                     : net == std::string("ipoib-100g") ? "ipoib"
                                                                        : "rdma");
    EXPECT_NEAR(comparison(id).predicted, best, 1e-12 * best) << net;
  }
}

TEST(Seeds, ComparisonsFollowTheRowsNotTheSeedFigures) {
  // Changing every published figure changes the differences, never the predictions.
  auto s = load_seeds_scenario("seeds");
  ASSERT_TRUE(s.ok());
  for (auto& h : s->headlines) h.seed = h.seed * 3 + 1;
  for (const auto& h : s->headlines) {
    auto c = compare_headline(h, seeds().rows, seeds().row_group);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_DOUBLE_EQ(c->predicted, comparison(h.id).predicted) << h.id;
    EXPECT_DOUBLE_EQ(c->difference, c->predicted - h.seed) << h.id;
    EXPECT_FALSE(c->reason.empty()) << h.id;
  }
}

TEST(Seeds, ProtocolPresetsEqualTheirDerivation) {
  // data/seeds/SOURCES.md: achievable = the highest `rate` row, latency = the small-message
  // time over its ring steps.
  std::ifstream in(std::string(COMMSCOPE_SOURCE_DIR) + "/data/seeds/protocols.csv");
  ASSERT_TRUE(in) << "data/seeds/protocols.csv";
  std::string line;
  std::getline(in, line);
  const auto header = csv_fields(line);
  auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const std::size_t c_preset = col("preset"), c_q = col("quantity"), c_v = col("value"),
                    c_steps = col("steps"), c_src = col("source_id");
  ASSERT_LT(c_src, header.size());
  std::map<std::string, double> rate, latency;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto f = csv_fields(line);
    ASSERT_EQ(f.size(), header.size()) << line;
    EXPECT_FALSE(f[c_src].empty()) << "a row without a source: " << line;
    ++rows;
    const double v = std::stod(f[c_v]);
    if (f[c_q] == "rate") rate[f[c_preset]] = std::max(rate[f[c_preset]], v);
    if (f[c_q] == "small_message_us") latency[f[c_preset]] = v / std::stod(f[c_steps]);
  }
  EXPECT_GE(rows, 6);
  for (const char* name : {"tcp-10g", "ipoib-100g", "rdma-100g"}) {
    auto p = load_network(name);
    ASSERT_TRUE(p.ok()) << name;
    ASSERT_TRUE(rate.count(name) && latency.count(name)) << name << " has no measurement rows";
    EXPECT_NEAR(units::to_gbit_per_s(p->achievable), rate[name], 1e-9) << name;
    EXPECT_NEAR(units::to_us(p->latency), latency[name], 1e-9) << name;
    // The seeds' observed peaks (9, 20, 60 Gb/s) are not what the presets hold for TCP and
    // RDMA: those are outcomes to predict (docs/seeds.md).
  }
  EXPECT_NE(units::to_gbit_per_s(load_network("rdma-100g")->achievable), 60);
  EXPECT_NE(units::to_gbit_per_s(load_network("tcp-10g")->achievable), 9);
}

TEST(Seeds, UcMercedSystemAsStated) {
  auto s = load_system("ucmerced-a100-pcie");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->node.gpus, 2);
  EXPECT_EQ(s->node.topology, IntraNodeTopology::pcie);
  EXPECT_EQ(s->nics.count, 1);
  EXPECT_DOUBLE_EQ(units::to_gbit_per_s(s->nics.line_rate), 100);
  EXPECT_EQ(s->gpu.name, "A100-PCIe-40GB");
  EXPECT_DOUBLE_EQ(units::to_gib(s->gpu.memory), 40);
}

TEST(Seeds, BadScenarioFilesAreRefusedWithTheField) {
  const nlohmann::json good = {{"name", "t"},
                               {"groups",
                                {{{"id", "a"},
                                  {"study", "s"},
                                  {"system", "polaris"},
                                  {"models", {"gpt2-medium"}},
                                  {"plans", {{{"nodes", 2}}}}}}},
                               {"headlines",
                                {{{"id", "h"},
                                  {"study", "s"},
                                  {"kind", "allreduce_share"},
                                  {"groups", {"a"}},
                                  {"seed", 50},
                                  {"unit", "%"}}}}};
  auto ok = seeds_scenario_from_json(good, "t.json");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->runs.size(), 1u);

  auto expect_error = [](nlohmann::json j, const std::string& field) {
    auto r = seeds_scenario_from_json(j, "t.json");
    ASSERT_FALSE(r.ok()) << "accepted: " << j.dump();
    EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  };
  nlohmann::json j = good;
  j["typo"] = 1;
  expect_error(j, "typo");
  j = good;
  j["groups"][0]["plans"] = nlohmann::json::array();
  expect_error(j, "plans");
  j = good;
  j["headlines"][0]["groups"] = {"nope"};
  expect_error(j, "groups");
  j = good;
  j["headlines"][0]["kind"] = "median";
  expect_error(j, "kind");
  j = good;
  j["groups"][0]["plans"][0] = {{"tp", 2}};
  expect_error(j, "nodes");
  j = good;
  j["groups"][0]["precision"] = "fp8";
  expect_error(j, "precision");
  j = good;
  j["headlines"][0]["kind"] = "speedup";
  expect_error(j, "network");
  j = good;
  j.erase("headlines");
  expect_error(j, "headlines");
  // the field's path with one dot between its parts (it read 'groups[0].plans[0]..framework'),
  // and an empty kind (it was taken as the first kind)
  j = good;
  j["groups"][0]["plans"][0]["framework"] = "x";
  expect_error(j, "field 'groups[0].plans[0].framework': unknown field");
  j = good;
  j["groups"][0]["label"] = 3;
  expect_error(j, "field 'groups[0].label'");
  j = good;
  j["headlines"][0]["kind"] = "";
  expect_error(j, "field 'headlines[0].kind': expected one of");
  // More runs than docs/limits.md allows: refused while the runs are listed, before predicting.
  j = good;
  j["groups"][0]["models"] = std::vector<std::string>(101, "gpt2-medium");
  j["groups"][0]["plans"] = std::vector<nlohmann::json>(100, {{"nodes", 2}});
  expect_error(j, "at most 10000 runs");
  expect_error(nlohmann::json::array(), "object");
}

// The CLI: `predict --scenario seeds` prints the rows and the comparison; JSON carries both;
// a wrong name or a scenario flag beside it is one line and exit status 2.
TEST(SeedsCli, PredictScenarioSeeds) {
  using commscope::testing::run_shell;
  const std::string bin = COMMSCOPE_BIN;
  auto o = run_shell(bin + " predict --scenario seeds");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("ucmerced-a100-pcie"), std::string::npos);
  EXPECT_NE(o.out.find("Seed studies' headlines"), std::string::npos);
  EXPECT_NE(o.out.find("why:"), std::string::npos);

  o = run_shell(bin + " predict --scenario seeds --format json");
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["predictions"].size(), seeds().rows.size());
  ASSERT_EQ(j["seeds"].size(), seeds().comparisons.size());
  for (std::size_t i = 0; i < j["seeds"].size(); ++i) {
    const auto& c = j["seeds"][i];
    EXPECT_DOUBLE_EQ(c["predicted"].get<double>(), seeds().comparisons[i].predicted);
    EXPECT_DOUBLE_EQ(c["seed"].get<double>() + c["difference"].get<double>(),
                     c["predicted"].get<double>());
  }
  EXPECT_EQ(j["predictions"][0]["seed_group"], seeds().row_group[0]);

  o = run_shell(bin + " predict --scenario seeds --format csv");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(static_cast<std::size_t>(std::count(o.out.begin(), o.out.end(), '\n')),
            seeds().rows.size() + 1);

  for (const std::string bad :
       {"predict --scenario nope", "predict --scenario ''",
        "predict --scenario seeds --model gpt2-large", "predict --scenario seeds --zero 1",
        "predict --scenario seeds --top 3"}) {
    o = run_shell(bin + " " + bad);
    EXPECT_EQ(o.status, 2) << bad;
    EXPECT_TRUE(o.out.empty()) << bad;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << bad << ": " << o.err;
    EXPECT_NE(o.err.find("--scenario"), std::string::npos) << o.err;
  }
}
