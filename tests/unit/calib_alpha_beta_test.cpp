// The alpha-beta fit recovers known latency and bandwidth from synthetic timings.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "commscope/calib/alpha_beta.h"

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

}  // namespace
}  // namespace commscope
