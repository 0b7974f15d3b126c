// Each JSON type commscope writes is read back by the reader beside its writer into the same
// value: every shipped model, system and network preset, and breakdowns of real simulated and
// hand-built timelines (through text, so number formatting is part of the trip).
#include <gtest/gtest.h>

#include "commscope/util/json_fields.h"

#include <nlohmann/json.hpp>

#include "commscope/calib/alpha_beta.h"
#include "commscope/calib/nccl_tests.h"
#include "commscope/spec/model.h"
#include "commscope/spec/preset.h"
#include "commscope/spec/system.h"
#include "commscope/timeline/breakdown_json.h"
#include "commscope/timeline/timeline.h"

namespace commscope {
namespace {

nlohmann::json through_text(const nlohmann::json& j) {
  return nlohmann::json::parse(j.dump());
}

TEST(JsonRoundTrip, EveryModelPreset) {
  const auto names = list_presets(PresetKind::model);
  ASSERT_FALSE(names.empty());
  for (const auto& n : names) {
    auto m = load_model(n);
    ASSERT_TRUE(m.ok()) << n << ": " << m.error().message;
    const nlohmann::json written = to_json(*m);
    auto back = model_from_json(through_text(written), n);
    ASSERT_TRUE(back.ok()) << n << ": " << back.error().message;
    EXPECT_EQ(to_json(*back), written) << n;
  }
}

TEST(JsonRoundTrip, EverySystemAndNetworkPreset) {
  for (const auto& n : list_presets(PresetKind::system)) {
    auto s = load_system(n);
    ASSERT_TRUE(s.ok()) << n << ": " << s.error().message;
    const nlohmann::json written = to_json(*s);
    auto back = system_from_json(through_text(written), n);
    ASSERT_TRUE(back.ok()) << n << ": " << back.error().message;
    EXPECT_EQ(to_json(*back), written) << n;
  }
  for (const auto& n : list_presets(PresetKind::network)) {
    auto p = load_network(n);
    ASSERT_TRUE(p.ok()) << n << ": " << p.error().message;
    const nlohmann::json written = to_json(*p);
    auto back = network_from_json(through_text(written), n);
    ASSERT_TRUE(back.ok()) << n << ": " << back.error().message;
    EXPECT_EQ(to_json(*back), written) << n;
  }
}

// A network profile with measured curves (fit of the real nccl-tests logs in
// tests/data/nccl-tests/): written, read and written again to the same JSON.
TEST(JsonRoundTrip, NetworkProfileWithCurves) {
  std::vector<MeasuredCollective> m;
  for (const char* f : {"a3mega-h100-2x8-all_reduce.txt", "rccl-mi300x-1x8-all_reduce.txt"}) {
    auto logs = read_nccl_tests(std::string(COMMSCOPE_SOURCE_DIR) + "/tests/data/nccl-tests/" + f);
    ASSERT_TRUE(logs.ok()) << logs.error().message;
    for (auto& x : to_measured(*logs)) m.push_back(x);
  }
  auto p = load_network("ib-ndr-400");
  ASSERT_TRUE(p.ok());
  p->curves = fit_bench(m).curves;
  ASSERT_EQ(p->curves.size(), 2u);
  const nlohmann::json written = to_json(*p);
  auto back = network_from_json(through_text(written), "profile");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(to_json(*back), written);
  EXPECT_EQ(back->curves[1].points.size(), 31u);
}

// A rank that computes, communicates partly under compute, copies memory and idles.
Timeline sample_timeline() {
  Timeline t;
  auto ev = [&](EventKind k, double start, double dur) {
    Event e;
    e.kind = k;
    e.start = start;
    e.dur = dur;
    e.name = t.intern(std::string(to_string(k)));
    return e;
  };
  t.events.push_back(ev(EventKind::compute, 0.0, 1.0));
  Event ar = ev(EventKind::comm, 0.5, 1.0 / 3);  // a third of a second: not exact in decimal
  ar.has_collective = true;
  ar.collective = Collective::all_reduce;
  ar.group = CommGroup::data;
  t.events.push_back(ar);
  Event ag = ev(EventKind::comm, 1.2, 0.25);
  ag.has_collective = true;
  ag.collective = Collective::all_gather;
  ag.group = CommGroup::tensor;
  ag.wait = 0.125;  // entered the call before its peers: a profiler sees 0.375 s
  t.events.push_back(ag);
  t.events.push_back(ev(EventKind::memcpy, 1.5, 0.1));
  t.events.push_back(ev(EventKind::compute, 2.0, 0.7));
  return t;
}

void expect_same(const Breakdown& a, const Breakdown& b) {
  EXPECT_EQ(a.wall, b.wall);
  EXPECT_EQ(a.compute, b.compute);
  EXPECT_EQ(a.comm, b.comm);
  EXPECT_EQ(a.overlapped, b.overlapped);
  EXPECT_EQ(a.exposed, b.exposed);
  EXPECT_EQ(a.memcpy, b.memcpy);
  EXPECT_EQ(a.idle, b.idle);
  EXPECT_EQ(a.bubble, b.bubble);
  EXPECT_EQ(a.profiler_comm, b.profiler_comm);
  for (std::size_t i = 0; i < kCommGroupCount; ++i) {
    EXPECT_EQ(a.by_group.v[i].profiler, b.by_group.v[i].profiler) << i;
    EXPECT_EQ(a.by_group.v[i].total, b.by_group.v[i].total) << i;
    EXPECT_EQ(a.by_group.v[i].exposed, b.by_group.v[i].exposed) << i;
  }
  for (std::size_t i = 0; i < kCollectiveCount; ++i) {
    EXPECT_EQ(a.by_collective.v[i].total, b.by_collective.v[i].total) << i;
    EXPECT_EQ(a.by_collective.v[i].exposed, b.by_collective.v[i].exposed) << i;
    EXPECT_EQ(a.by_collective.v[i].profiler, b.by_collective.v[i].profiler) << i;
  }
}

TEST(JsonRoundTrip, Breakdown) {
  Breakdown b = breakdown(sample_timeline(), 0);
  b.bubble = 0.125;
  // The sample really has every part, so the trip is tested on non-zero values.
  ASSERT_GT(b.overlapped, 0);
  ASSERT_GT(b.exposed, 0);
  ASSERT_GT(b.memcpy, 0);
  ASSERT_GT(b.idle, 0);
  ASSERT_GT(b.by_group[CommGroup::tensor].total, 0);
  ASSERT_GT(b.profiler_comm, b.comm);  // the sample's all-gather waited for its peers
  const nlohmann::json j = breakdown_to_json(b);
  EXPECT_EQ(j["comm_by_collective"].size(), 2u);
  auto back = breakdown_from_json(through_text(j), "test");
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same(b, *back);
  EXPECT_EQ(breakdown_to_json(*back), j);
}

TEST(JsonRoundTrip, BreakdownReaderNamesWhatIsWrong) {
  const nlohmann::json good = breakdown_to_json(breakdown(sample_timeline(), 0));
  auto message = [](const nlohmann::json& j) {
    auto r = breakdown_from_json(j, "doc.json");
    return r.ok() ? std::string("accepted") : r.error().message;
  };
  nlohmann::json j = good;
  j.erase("idle_s");
  EXPECT_NE(message(j).find("'idle_s'"), std::string::npos) << message(j);
  j = good;
  j["compute_s"] = -1.0;
  EXPECT_NE(message(j).find("'compute_s'"), std::string::npos) << message(j);
  j = good;
  j["comm_by_group"]["bogus"] = {{"total_s", 1.0}, {"exposed_s", 0.0}};
  EXPECT_NE(message(j).find("bogus"), std::string::npos) << message(j);
  j = good;
  j["comm_by_collective"]["all_reduce"].erase("exposed_s");
  EXPECT_NE(message(j).find("comm_by_collective.all_reduce.exposed_s"), std::string::npos)
      << message(j);
  EXPECT_NE(message(nlohmann::json::array()).find("doc.json"), std::string::npos);
  // Files written before the profiler view existed read with profiler = total.
  j = good;
  j.erase("profiler_comm_s");
  for (auto& [name, share] : j["comm_by_group"].items()) share.erase("profiler_s");
  auto old = breakdown_from_json(j, "old.json");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old->profiler_comm, old->comm);
  EXPECT_EQ(old->by_group[CommGroup::tensor].profiler, old->by_group[CommGroup::tensor].total);
  j = good;
  j["profiler_comm_s"] = -2.0;
  EXPECT_NE(message(j).find("'profiler_comm_s'"), std::string::npos) << message(j);
}

}  // namespace
}  // namespace commscope

// A configuration text of many objects parses (the parser callback that followed the keys took
// time quadratic in them: 640,000, 2.5 MB, ran past a minute), and a number beyond a double
// still names its key, past those objects.
TEST(JsonParse, ManyObjectsParseAndOverflowNamesItsKey) {
  std::string many = "{\"name\": \"n\", \"zzz\": [";
  for (int i = 0; i < 640000; ++i) many += i ? ",{}" : "{}";
  many += "]";
  auto ok = commscope::parse_json_text(many + "}", "many.json");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ((*ok)["zzz"].size(), 640000u);
  auto over = commscope::parse_json_text(many + ", \"layers\": {\"count\": 1e400}}", "many.json");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().message,
            "many.json: field 'count': expected a number within a double's range (about "
            "1.8e308), got '1e400'");
}

// A key given twice in one object is refused with its path: nlohmann keeps the last in silence,
// so {"layers": 32, "layers": 4000} was a 4000-layer model (found by probing, 2026-12-02).
// Keys repeated in different objects are no duplicates.
TEST(JsonParse, AKeyTwiceInOneObjectIsRefusedWithItsPath) {
  for (const auto& [text, path] : std::vector<std::pair<std::string, std::string>>{
           {R"({"layers": 32, "layers": 4000})", "layers"},
           {R"({"zero_optimization": {"stage": 3, "stage": 0}})", "zero_optimization.stage"},
           {R"({"a": [{"b": 1}, {"c": [1, {"d": 1, "d": 2}]}]})", "a[1].c[1].d"},
           {R"({"": {"x": 1, "x": 1}})", "\"\".x"}}) {
    SCOPED_TRACE(text);
    auto r = commscope::parse_json_text(text, "f.json");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message,
              "f.json: field '" + path +
                  "': expected each key once in its object, got it twice (which one counts is up "
                  "to the reader)");
  }
  auto ok = commscope::parse_json_text(
      R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})", "f.json");
  EXPECT_TRUE(ok.ok()) << ok.error().message;
}
