// The trainer's kernels timed on the model's shapes (measure.h).
#include "commscope/gpt/measure.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "commscope/gpt/kernels.h"
#include "commscope/gpt/optim.h"

namespace commscope::train {

namespace {

// The mean, not the median: on a shared host a kernel of a millisecond is now and then
// preempted for a whole time slice; the median of each kernel drops those, while the training
// runs this predicts pay them on average.
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The forward GEMM shape [m x k] x [k x n] of a kernel of gpt.h, 0s for the others.
void gemm_shape(const GptConfig& c, int batch, std::string_view name, KernelTiming& t) {
  const std::int64_t bt = std::int64_t{batch} * c.seq, h = c.hidden;
  auto set = [&](std::int64_t n, std::int64_t k) {
    t.m = bt;
    t.n = n;
    t.k = k;
  };
  if (name == "qkv") set(3 * h, h);
  if (name == "attn_out") set(h, h);
  if (name == "mlp_in") set(4 * h, h);
  if (name == "mlp_out") set(h, 4 * h);
  if (name == "lm_head") set(c.vocab, h);
}

// One process's measurement (means over its repetitions).
ComputeMeasurement measure_here(const GptConfig& cfg, int batch, int reps) {
  set_threads(1);
  Gpt g(cfg, batch);
  const std::int64_t np = g.layout().total();
  std::vector<float> params(np), grads(np, 0.f), m(np, 0.f), v(np, 0.f);
  init_params(g.layout(), params.data(), 1234);
  std::vector<std::int32_t> tokens(std::size_t(batch) * cfg.seq), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 7919 + 13) % cfg.vocab);
    targets[i] = static_cast<std::int32_t>((i * 104729 + 7) % cfg.vocab);
  }
  std::vector<std::pair<std::string, bool>> order;
  std::map<std::pair<std::string, bool>, double> flops;
  std::map<std::pair<std::string, bool>, int> calls;
  std::map<std::pair<std::string, bool>, std::vector<double>> secs;
  std::map<std::pair<std::string, bool>, double> cur;
  bool warm_up = true;  // FLOPs are counted over the warm-up pass
  g.set_observer([&](const OpRecord& r) {
    const auto key = std::make_pair(std::string(r.name), r.backward);
    if (!flops.count(key)) {
      order.push_back(key);
      flops[key] = 0;
    }
    cur[key] += r.end_s - r.start_s;
    if (warm_up) {
      flops[key] += r.flops;
      ++calls[key];
    }
  });
  std::vector<double> fb, opt;
  for (int rep = 0; rep <= reps; ++rep) {
    cur.clear();
    const double t0 = Gpt::now();
    g.forward(params.data(), tokens.data(), targets.data());
    g.backward(params.data(), grads.data());
    const double t1 = Gpt::now();
    const double norm = std::sqrt(sum_of_squares(grads.data(), np));
    adamw_step(params.data(), grads.data(), m.data(), v.data(), np, AdamW{}, rep + 1,
               clip_factor(norm, 1.0f));
    std::fill(grads.begin(), grads.end(), 0.f);
    const double t2 = Gpt::now();
    if (warm_up) {
      warm_up = false;
      continue;
    }
    for (auto& [k, s] : cur) secs[k].push_back(s);
    fb.push_back(t1 - t0);
    opt.push_back(t2 - t1);
  }
  ComputeMeasurement out;
  out.batch = batch;
  out.parameters = np;
  out.forward_backward_s = mean(fb);
  out.optimizer_s = mean(opt);
  for (const auto& key : order) {
    KernelTiming t;
    t.name = key.first;
    t.backward = key.second;
    t.flops = flops[key];
    t.calls = calls[key];
    t.seconds = mean(secs[key]);
    gemm_shape(cfg, batch, t.name, t);
    out.kernels.push_back(t);
  }
  return out;
}

std::string serialize(const ComputeMeasurement& m) {
  std::string s =
      fmt::format("{:.17g} {:.17g} {}\n", m.forward_backward_s, m.optimizer_s, m.kernels.size());
  for (const auto& k : m.kernels)
    s += fmt::format("{} {} {:.17g} {:.17g}\n", k.name, k.backward ? 1 : 0, k.flops, k.seconds);
  return s;
}

}  // namespace

Result<ComputeMeasurement> measure_compute(const GptConfig& cfg, int batch, int reps,
                                           int concurrency) {
  if (Status s = validate(cfg); !s.ok()) return s.error();
  if (batch < 1) return Error{fmt::format("micro-batch: expected at least 1, got {}", batch)};
  if (reps < 1 || reps > 1000)
    return Error{fmt::format("repetitions: expected 1 to 1000, got {}", reps)};
  if (concurrency < 1 || concurrency > 256)
    return Error{fmt::format("concurrency: expected 1 to 256, got {}", concurrency)};
  if (concurrency == 1) {
    ComputeMeasurement m = measure_here(cfg, batch, reps);
    return m;
  }
  // One child process per concurrent measurement, each reporting through a pipe.
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (int c = 0; c < concurrency; ++c) {
    int p[2];
    if (::pipe(p) != 0) break;
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(p[0]);
      ::close(p[1]);
      break;
    }
    if (pid == 0) {
      ::close(p[0]);
      const std::string s = serialize(measure_here(cfg, batch, reps));
      std::size_t off = 0;
      while (off < s.size()) {
        const ssize_t w = ::write(p[1], s.data() + off, s.size() - off);
        if (w <= 0) ::_exit(1);
        off += static_cast<std::size_t>(w);
      }
      ::_exit(0);
    }
    ::close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
  }
  std::vector<std::string> texts(fds.size());
  for (std::size_t i = 0; i < fds.size(); ++i) {
    char buf[4096];
    ssize_t r;
    while ((r = ::read(fds[i], buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
      if (r > 0) texts[i].append(buf, static_cast<std::size_t>(r));
    ::close(fds[i]);
  }
  bool failed = pids.size() != static_cast<std::size_t>(concurrency);
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  if (failed) return Error{"compute measurement: a measuring process failed"};
  ComputeMeasurement mean = measure_here(GptConfig{cfg}, batch, 1);  // shapes and order
  mean.concurrency = concurrency;
  mean.forward_backward_s = mean.optimizer_s = 0;
  for (auto& k : mean.kernels) k.seconds = 0;
  for (const std::string& t : texts) {
    std::istringstream in(t);
    double fb = 0, op = 0;
    std::size_t n = 0;
    in >> fb >> op >> n;
    if (!in || n != mean.kernels.size())
      return Error{"compute measurement: a measuring process reported nothing"};
    mean.forward_backward_s += fb / concurrency;
    mean.optimizer_s += op / concurrency;
    for (auto& k : mean.kernels) {
      std::string name;
      int bw = 0;
      double fl = 0, s = 0;
      in >> name >> bw >> fl >> s;
      if (!in || name != k.name || (bw == 1) != k.backward)
        return Error{"compute measurement: the processes disagree on the kernels"};
      k.seconds += s / concurrency;
    }
  }
  return mean;
}

}  // namespace commscope::train
