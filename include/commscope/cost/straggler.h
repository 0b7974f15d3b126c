// Stragglers: a collective begins when the slowest rank of its group reaches it. With each
// rank's compute time between two synchronising collectives normal with mean mu and standard
// deviation cv x mu, the group waits on average mu x cv x E[max of n standard normals] beyond
// the mean rank (docs/cost-model.md, "Scale effects").
#pragma once

namespace commscope {

// E[max of n independent standard normals], by numerical integration of
// n x phi(x) x Phi(x)^(n-1) x x over x (exact to about 1e-9); 0 for n <= 1.
double expected_max_normal_exact(long long n);

// Blom's approximation Phi^-1((n - 0.375) / (n + 0.25)) (Blom 1958; Harter 1961 tables): within
// 5% of the exact value for every n >= 2 and closing in as n grows, at the cost of one
// inverse normal CDF. What the simulator uses per group. 0 for n <= 1.
double expected_max_normal(long long n);

// Inverse of the standard normal CDF (Acklam's rational approximation refined by one Halley
// step; |error| < 1e-12 on (0, 1)).
double inverse_normal_cdf(double p);

}  // namespace commscope
