// Expected maximum of n standard normals: the integral and Blom's approximation.
#include "commscope/cost/straggler.h"

#include <cmath>

namespace commscope {

double inverse_normal_cdf(double p) {
  if (!(p > 0)) return -INFINITY;
  if (!(p < 1)) return INFINITY;
  // P. J. Acklam's algorithm (2003): rational approximations in the central region and tails.
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425, hi = 1 - lo;
  double x;
  if (p < lo) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= hi) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  // One Halley step on Phi(x) - p.
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

double expected_max_normal(long long n) {
  if (n <= 1) return 0;
  const double nn = static_cast<double>(n);
  return inverse_normal_cdf((nn - 0.375) / (nn + 0.25));
}

double expected_max_normal_exact(long long n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx. Phi^(n-1) is computed as
  // exp((n-1) log Phi) so that n up to 2^62 stays finite. The density is negligible outside
  // [-10, 10 + sqrt(2 ln n)]; Simpson's rule on 20,000 intervals.
  const double nn = static_cast<double>(n);
  const double lo = -10, hi = 10 + std::sqrt(2 * std::log(nn));
  const int steps = 20000;
  const double h = (hi - lo) / steps;
  auto f = [&](double x) {
    const double phi = std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    if (cdf <= 0) return 0.0;
    return x * nn * phi * std::exp((nn - 1) * std::log(cdf));
  };
  double s = f(lo) + f(hi);
  for (int i = 1; i < steps; ++i) s += f(lo + i * h) * (i % 2 ? 4 : 2);
  return s * h / 3;
}

}  // namespace commscope
