// The trainer's report (report.h).
#include "report.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>
#include <type_traits>

#include <fmt/format.h>

#include "commscope/comm/mpi.h"
#include "commscope/timeline/breakdown_json.h"
#include "commscope/timeline/chrome.h"
#include "commscope/util/atomic_file.h"

namespace commscope::train {

std::vector<const StepRow*> after_warmup(const std::vector<StepRow>& rows, std::int64_t start,
                                         int warmup) {
  const auto iterations = static_cast<std::int64_t>(rows.size());
  std::vector<const StepRow*> out;
  for (const StepRow& r : rows)
    if (r.step > start + warmup || iterations <= warmup) out.push_back(&r);
  return out;
}

void averages(const std::vector<StepRow>& rows, std::int64_t start, int warmup, Breakdown* avg,
              double* time) {
  int counted = 0;
  for (const StepRow* r : after_warmup(rows, start, warmup)) {
    avg->add(r->br);
    *time += r->seconds;
    ++counted;
  }
  if (counted > 0) {
    avg->scale(1.0 / counted);
    *time /= counted;
  }
}

void write_rank_trace(const std::string& trace, int rank, const Timeline& names,
                      const std::vector<StepRow>& rows,
                      std::initializer_list<const std::vector<Event>*> lists,
                      const std::string& rank_name, std::initializer_list<const char*> streams) {
  if (trace.empty()) return;
  Timeline t = names;
  t.events.clear();
  for (const auto* l : lists) t.events.insert(t.events.end(), l->begin(), l->end());
  t.rank_names[rank] = rank_name;
  int stream = 0;
  for (const char* s : streams) t.stream_names[{rank, stream++}] = s;
  // The steps, as PyTorch's profiler marks them (ProfilerStep#N, cat user_annotation): analyze
  // then breaks the run down step by step, the warm-up apart (the trace had no steps, and
  // analyze gave the whole run as one; found by probing, 2026-12-02).
  if (!rows.empty()) t.stream_names[{rank, stream}] = "steps";
  for (const StepRow& r : rows) {
    Event e;
    e.rank = rank;
    e.stream = stream;
    e.start = r.start_s;
    e.dur = r.seconds;
    e.marker = Event::Marker::step;
    e.name = t.intern(fmt::format("ProfilerStep#{}", r.step));
    t.events.push_back(e);
  }
  const std::string path = trace_path(trace, rank);
  const Status s = write_file_atomic(path, trace_file_bytes(path, chrome_trace_json(t)));
  if (!s.ok()) std::fprintf(stderr, "commscope: rank %d: %s\n", rank, s.error().message.c_str());
}

std::vector<nlohmann::json> gather_rank_averages(
    MPI_Comm comm, int me, int ranks, const std::vector<StepRow>& rows, std::int64_t start,
    int warmup, std::initializer_list<std::pair<const char*, int>> coords) {
  static_assert(std::is_trivially_copyable_v<Breakdown>);
  struct Averages {
    double time = 0;
    Breakdown breakdown;
    std::array<int, 3> coord{};
  } mine;
  CS_CHECK(coords.size() <= mine.coord.size());
  averages(rows, start, warmup, &mine.breakdown, &mine.time);
  std::size_t i = 0;
  for (const auto& c : coords) mine.coord[i++] = c.second;
  std::vector<Averages> all(static_cast<std::size_t>(me == 0 ? ranks : 0));
  CS_MPI_CHECK(
      MPI_Gather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, 0, comm));
  std::vector<nlohmann::json> out;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const Averages& a = all[static_cast<std::size_t>(r)];
    nlohmann::json x = {{"rank", r}, {"time_s", a.time}};
    i = 0;
    for (const auto& c : coords) x[c.first] = a.coord[i++];
    x.update(breakdown_to_json(a.breakdown));
    out.push_back(std::move(x));
  }
  return out;
}

// Rank 0: the averages after warm-up, the communication against the workload; table or json.
int print_report(const RunRecord& r) {
  const TrainOptions& o_ = *r.o;
  const std::vector<StepRow>& rows_ = *r.rows;
  const int n_ = r.ranks;
  const std::int64_t accum_ = r.accum;
  const std::int64_t total = r.parameters;
  const std::int64_t global = accum_ * (r.dp > 0 ? r.dp : n_) * o_.micro_batch;
  const double tokens_per_step = r.tokens_per_step;
  const double flops = r.flops_per_step;
  const std::int64_t iterations = static_cast<std::int64_t>(rows_.size());
  Breakdown avg;
  double avg_time = 0;
  averages(rows_, r.start, o_.warmup, &avg, &avg_time);

  bool match = true;
  const nlohmann::json comm = comm_table(*r.measured, *r.expected, iterations, &match);
  // A model with experts: the routing and load-balancing loss over the steps after the warm-up
  // (all of them when there are no more), as the step time is averaged.
  const bool moe = !rows_.empty() && rows_.front().moe;
  nlohmann::json moe_avg;
  if (moe) {
    double aux = 0, ranks = 0, experts = 0;
    int counted = 0;
    for (const StepRow* row : after_warmup(rows_, r.start, o_.warmup)) {
      aux += row->moe_aux_loss, ranks += row->moe_rank_imbalance;
      experts += row->moe_expert_imbalance, ++counted;
    }
    counted = std::max(counted, 1);
    moe_avg = {{"aux_loss", aux / counted},
               {"routing_imbalance", ranks / counted},
               {"expert_imbalance", experts / counted}};
  }
  bool written = true;
  {
    nlohmann::json steps = nlohmann::json::array();
    for (const StepRow& row : rows_) {
      steps.push_back({{"step", row.step},
                       {"loss", row.loss},
                       {"grad_norm", row.grad_norm},
                       {"time_s", row.seconds},
                       {"tokens_per_s", tokens_per_step / row.seconds},
                       {"gflops", flops / row.seconds / 1e9},
                       {"breakdown", breakdown_to_json(row.br)},
                       {"buckets_issued_during_backward", row.buckets_during_backward}});
      if (row.moe)
        steps.back()["moe"] = {{"aux_loss", row.moe_aux_loss},
                               {"routing_imbalance", row.moe_rank_imbalance},
                               {"expert_imbalance", row.moe_expert_imbalance}};
    }
    nlohmann::json j = {{"model",
                         {{"name", o_.model_name},
                          {"layers", o_.model.layers},
                          {"hidden", o_.model.hidden},
                          {"heads", o_.model.heads},
                          {"vocab", o_.model.vocab},
                          {"seq", o_.model.seq},
                          {"parameters", total}}},
                        {"strategy", to_string(o_.strategy)},
                        {"ranks", n_},
                        {"micro_batch", o_.micro_batch},
                        {"grad_accum", accum_},
                        {"global_batch", global},
                        {"data", r.data},
                        {"steps", steps},
                        {"average",
                         {{"after_warmup_steps", o_.warmup},
                          {"time_s", avg_time},
                          {"tokens_per_s", avg_time > 0 ? tokens_per_step / avg_time : 0},
                          {"gflops", avg_time > 0 ? flops / avg_time / 1e9 : 0},
                          {"comm_share", avg.wall > 0 ? avg.comm / avg.wall : 0},
                          {"breakdown", breakdown_to_json(avg)}}},
                        {"communication", comm},
                        {"communication_matches_workload", match && r.other_ranks_match},
                        {"memory_per_rank_bytes", r.memory},
                        {"per_rank", r.per_rank}};
    if (moe) j["average"]["moe"] = moe_avg;
    if (!r.parallel.is_null()) j["parallel"] = r.parallel;
    if (!r.by_stage.is_null()) j["communication_by_stage"] = r.by_stage;
    if (o_.format == "json") std::printf("%s\n", j.dump(2).c_str());
    if (!o_.output.empty()) {
      const Status s = write_file_atomic(o_.output, j.dump(2) + "\n");
      if (!s.ok()) {
        std::fprintf(stderr, "commscope: %s\n", s.error().message.c_str());
        written = false;  // the run's figures are lost: not a success
      }
    }
  }
  if (o_.format == "table") {
    std::printf(
        "# average after %d warm-up steps: %.2f ms/step, %.0f tokens/s, %.2f GFLOP/s (all ranks), "
        "compute %.2f ms, communication %.2f ms (overlapped %.2f, exposed %.2f), idle %.2f ms\n",
        o_.warmup, avg_time * 1e3, avg_time > 0 ? tokens_per_step / avg_time : 0,
        avg_time > 0 ? flops / avg_time / 1e9 : 0, avg.compute * 1e3, avg.comm * 1e3,
        avg.overlapped * 1e3, avg.exposed * 1e3, avg.idle * 1e3);
    std::printf("# per rank, averages after warm-up (ms):\n#   %4s %9s %9s %9s %9s %9s\n", "rank",
                "step", "compute", "ovl_comm", "exp_comm", "idle");
    for (const auto& pr : r.per_rank)
      std::printf("#   %4d %9.2f %9.2f %9.2f %9.2f %9.2f\n", pr["rank"].get<int>(),
                  pr["time_s"].get<double>() * 1e3, pr["compute_s"].get<double>() * 1e3,
                  pr["overlapped_comm_s"].get<double>() * 1e3,
                  pr["exposed_comm_s"].get<double>() * 1e3, pr["idle_s"].get<double>() * 1e3);
    if (moe)
      std::printf(
          "# routing after warm-up: the busiest EP rank's rows %.3fx the mean "
          "(--moe-routing-imbalance for EP %d), the busiest expert's %.3fx; load-balancing loss "
          "%.5f per MoE block\n",
          moe_avg["routing_imbalance"].get<double>(), o_.ep,
          moe_avg["expert_imbalance"].get<double>(), moe_avg["aux_loss"].get<double>());
    const auto mem = r.memory;
    std::printf(
        "# state held per rank (rank 0): parameters %.1f MB, gradients %.1f MB, optimizer %.1f MB; "
        "peak resident %.1f MB\n",
        mem["parameters"].get<double>() / 1e6, mem["gradients"].get<double>() / 1e6,
        mem["optimizer_state"].get<double>() / 1e6, mem["peak_resident"].get<double>() / 1e6);
    std::printf("# communication per iteration, rank 0, measured vs the workload (describe):\n");
    std::printf("# %-8s %-15s %8s %14s %8s %8s %14s %8s\n", "group", "collective", "calls", "bytes",
                "messages", "w.calls", "w.bytes", "w.msgs");
    for (const auto& c : comm)
      std::printf("# %-8s %-15s %8.0f %14.0f %8.0f %8.0f %14.0f %8.0f\n",
                  c["group"].get<std::string>().c_str(), c["collective"].get<std::string>().c_str(),
                  c["calls_per_iteration"].get<double>(), c["bytes_per_iteration"].get<double>(),
                  c["messages_per_iteration"].get<double>(), c["workload_calls"].get<double>(),
                  c["workload_bytes"].get<double>(), c["workload_messages"].get<double>());
    std::printf("# %s\n",
                match ? "measured communication equals the workload's: calls, bytes and messages"
                      : "MISMATCH: measured communication differs from the workload's");
  }
  if (!r.other_ranks_match) {
    if (o_.format == "table")
      std::printf("# MISMATCH: another rank's communication differs from its stage's workload\n");
    return 1;
  }
  return match && written ? 0 : 1;
}

nlohmann::json comm_table(const MeasuredComm& measured, const std::vector<CommVolume>& expected,
                          std::int64_t iterations, bool* matches) {
  nlohmann::json comm = nlohmann::json::array();
  bool match = true;
  std::map<std::pair<CommGroup, Collective>, CommCount> exp;  // a key's rows summed
  for (const CommVolume& v : expected) {
    CommCount& e = exp[{v.group, v.collective}];
    e.calls += v.calls;
    e.bytes += v.bytes;
    e.messages += v.messages;
  }
  std::set<std::pair<CommGroup, Collective>> keys;
  for (auto& [k, v] : measured) keys.insert(k);
  for (auto& [k, v] : exp) keys.insert(k);
  const double its = static_cast<double>(std::max<std::int64_t>(iterations, 1));
  for (const auto& k : keys) {
    const auto it = measured.find(k);
    const CommCount m = it == measured.end() ? CommCount{} : it->second;
    const CommCount e = exp.count(k) ? exp[k] : CommCount{};
    const double calls = static_cast<double>(m.calls) / its, bytes = m.bytes / its,
                 messages = static_cast<double>(m.messages) / its;
    match = match && calls == static_cast<double>(e.calls) && bytes == e.bytes &&
            messages == static_cast<double>(e.messages);
    comm.push_back({{"group", to_string(k.first)},
                    {"collective", to_string(k.second)},
                    {"calls_per_iteration", calls},
                    {"bytes_per_iteration", bytes},
                    {"messages_per_iteration", messages},
                    {"workload_calls", static_cast<double>(e.calls)},
                    {"workload_bytes", e.bytes},
                    {"workload_messages", static_cast<double>(e.messages)}});
  }
  if (matches) *matches = match;
  return comm;
}

bool comm_matches(const MeasuredComm& measured, const std::vector<CommVolume>& expected,
                  std::int64_t iterations) {
  if (iterations <= 0) return true;
  bool match = true;
  comm_table(measured, expected, iterations, &match);
  return match;
}

void attribute_waits(std::vector<Event>& events, const std::vector<std::size_t>& calls, double t0,
                     MPI_Comm comm) {
  int size = 1;
  CS_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size < 2) return;
  std::vector<double> entry;
  entry.reserve(calls.size());
  for (std::size_t i : calls) entry.push_back(events[i].start + t0);  // absolute
  int n = static_cast<int>(entry.size()), lo = 0, hi = 0;
  CS_MPI_CHECK(MPI_Allreduce(&n, &lo, 1, MPI_INT, MPI_MIN, comm));
  CS_MPI_CHECK(MPI_Allreduce(&n, &hi, 1, MPI_INT, MPI_MAX, comm));
  if (lo != hi || n == 0) return;
  const auto un = static_cast<std::size_t>(n);
  std::vector<double> all(un * static_cast<std::size_t>(size));
  CS_MPI_CHECK(MPI_Allgather(entry.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, comm));
  for (std::size_t k = 0; k < un; ++k) {
    double last = entry[k];
    for (std::size_t r = 0; r < static_cast<std::size_t>(size); ++r)
      last = std::max(last, all[r * un + k]);
    Event& e = events[calls[k]];
    const double w = std::clamp(last - entry[k], 0.0, e.dur);
    e.wait = w, e.start += w, e.dur -= w;
  }
}

}  // namespace commscope::train
