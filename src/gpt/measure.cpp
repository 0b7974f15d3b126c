// The trainer's kernels timed on the model's shapes (measure.h).
#include "commscope/gpt/measure.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "commscope/gpt/kernels.h"
#include "commscope/gpt/optim.h"
#include "commscope/gpt/t5.h"

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

using Key = std::pair<std::string, bool>;  // kernel name, backward

// One process's timings: an observer of a model's kernels (Gpt's or T5's OpRecords) and the
// repetitions' forward + backward and AdamW times, turned into a ComputeMeasurement.
class Recorder {
 public:
  OpObserver observer() {
    return [this](const OpRecord& r) {
      const Key key(std::string(r.name), r.backward);
      auto [it, added] = kernels_.try_emplace(key);
      if (added) {
        order_.push_back(key);
        it->second.name = key.first;
        it->second.backward = r.backward;
        it->second.m = r.m, it->second.n = r.n, it->second.k = r.k;
      }
      cur_[key] += r.end_s - r.start_s;
      if (warm_up_) {  // FLOPs and calls are counted over the warm-up pass
        it->second.flops += r.flops;
        ++it->second.calls;
      }
    };
  }
  // reps timed forward + backward passes (`fwd_bwd`, accumulating into grads) after one
  // warm-up, each followed by an AdamW step over every parameter with the gradient norm.
  template <class F>
  void run(int reps, F&& fwd_bwd, std::vector<float>& params, std::vector<float>& grads) {
    const std::int64_t np = static_cast<std::int64_t>(params.size());
    std::vector<float> m(params.size(), 0.f), v(params.size(), 0.f);
    for (int rep = 0; rep <= reps; ++rep) {
      cur_.clear();
      const double t0 = Gpt::now();
      fwd_bwd();
      const double t1 = Gpt::now();
      const double norm = std::sqrt(sum_of_squares(grads.data(), np));
      adamw_step(params.data(), grads.data(), m.data(), v.data(), np, AdamW{}, rep + 1,
                 clip_factor(norm, 1.0f));
      std::fill(grads.begin(), grads.end(), 0.f);
      const double t2 = Gpt::now();
      if (warm_up_) {
        warm_up_ = false;
        continue;
      }
      for (auto& [k, sec] : cur_) secs_[k].push_back(sec);
      fb_.push_back(t1 - t0);
      opt_.push_back(t2 - t1);
    }
  }
  ComputeMeasurement result(int batch, std::int64_t parameters) {
    ComputeMeasurement out;
    out.batch = batch;
    out.parameters = parameters;
    out.forward_backward_s = mean(fb_);
    out.optimizer_s = mean(opt_);
    for (const Key& key : order_) {
      KernelTiming k = kernels_[key];
      k.seconds = mean(secs_[key]);
      out.kernels.push_back(k);
    }
    return out;
  }

 private:
  std::vector<Key> order_;  // first seen first
  std::map<Key, KernelTiming> kernels_;
  std::map<Key, double> cur_;                // this repetition's seconds per kernel
  std::map<Key, std::vector<double>> secs_;  // per kernel, one entry per timed repetition
  std::vector<double> fb_, opt_;             // forward + backward, AdamW, per repetition
  bool warm_up_ = true;
};

// One process's measurement of the CPU GPT (means over its repetitions).
ComputeMeasurement measure_here(const GptConfig& cfg, int batch, int reps) {
  set_threads(1);
  Gpt g(cfg, batch);
  std::vector<float> params(g.layout().total()), grads(params.size(), 0.f);
  init_params(g.layout(), params.data(), 1234);
  std::vector<std::int32_t> tokens(std::size_t(batch) * cfg.seq), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 7919 + 13) % cfg.vocab);
    targets[i] = static_cast<std::int32_t>((i * 104729 + 7) % cfg.vocab);
  }
  Recorder rec;
  g.set_observer(rec.observer());
  rec.run(
      reps,
      [&] {
        g.forward(params.data(), tokens.data(), targets.data());
        g.backward(params.data(), grads.data());
      },
      params, grads);
  ComputeMeasurement out = rec.result(batch, g.layout().total());
  for (KernelTiming& k : out.kernels) gemm_shape(cfg, batch, k.name, k);
  return out;
}

// The same for T5 (t5.h): its own kernels, each with the shape its observer reports.
ComputeMeasurement measure_t5_here(const T5Config& cfg, int batch, int reps) {
  set_threads(1);
  T5<float> t5(cfg, batch);
  std::vector<float> params(t5.layout().total()), grads(params.size(), 0.f);
  init_t5_params(t5.layout(), params.data(), 1234);
  const T5Batch data = t5_synthetic_batch(cfg, batch, 0, 1234);
  Recorder rec;
  t5.set_observer(rec.observer());
  rec.run(
      reps,
      [&] {
        t5.forward(params.data(), data.encoder_tokens.data(), data.decoder_tokens.data(),
                   data.targets.data());
        t5.backward(params.data(), grads.data());
      },
      params, grads);
  return rec.result(batch, t5.layout().total());
}

std::string serialize(const ComputeMeasurement& m) {
  std::string s =
      fmt::format("{:.17g} {:.17g} {}\n", m.forward_backward_s, m.optimizer_s, m.kernels.size());
  for (const auto& k : m.kernels)
    s += fmt::format("{} {} {:.17g} {:.17g}\n", k.name, k.backward ? 1 : 0, k.flops, k.seconds);
  return s;
}

}  // namespace

namespace {
// `here(reps)` in `concurrency` processes at once (fork; each reports through a pipe), and the
// means over them; concurrency 1 measures in this process.
Result<ComputeMeasurement> in_processes(const std::function<ComputeMeasurement(int)>& here,
                                        int batch, int reps, int concurrency) {
  if (batch < 1) return Error{fmt::format("micro-batch: expected at least 1, got {}", batch)};
  if (reps < 1 || reps > 1000)
    return Error{fmt::format("repetitions: expected 1 to 1000, got {}", reps)};
  if (concurrency < 1 || concurrency > 256)
    return Error{fmt::format("concurrency: expected 1 to 256, got {}", concurrency)};
  if (concurrency == 1) return here(reps);
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
      const std::string s = serialize(here(reps));
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
  ComputeMeasurement mean = here(1);  // shapes and order
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
}  // namespace

Result<ComputeMeasurement> measure_compute(const GptConfig& cfg, int batch, int reps,
                                           int concurrency) {
  if (Status s = validate(cfg); !s.ok()) return s.error();
  return in_processes([&](int r) { return measure_here(cfg, batch, r); }, batch, reps, concurrency);
}

Result<ComputeMeasurement> measure_t5_compute(const T5Config& cfg, int batch, int reps,
                                              int concurrency) {
  if (Status s = validate(cfg); !s.ok()) return s.error();
  return in_processes([&](int r) { return measure_t5_here(cfg, batch, r); }, batch, reps,
                      concurrency);
}

}  // namespace commscope::train
