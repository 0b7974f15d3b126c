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

}  // namespace
}  // namespace commscope
