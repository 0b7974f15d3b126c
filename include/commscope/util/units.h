// Physical quantities as types (bytes, seconds, FLOPs, rates) and the one place where
// units given in files and flags (GB/s, Gbps, GiB, TFLOP/s) are converted. Not a general
// dimensional-analysis library: only the products and quotients commscope needs.
#pragma once

#include <compare>
#include <cstdio>
#include <cstdlib>

namespace commscope {

template <class Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : v_(v) {}
  constexpr double value() const { return v_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(v_ + o.v_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v_ - o.v_); }
  constexpr Quantity& operator+=(Quantity o) {
    v_ += o.v_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    v_ -= o.v_;
    return *this;
  }
  constexpr Quantity operator*(double k) const { return Quantity(v_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(v_ / k); }
  constexpr double operator/(Quantity o) const { return v_ / o.v_; }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  double v_ = 0.0;
};

template <class Tag>
constexpr Quantity<Tag> operator*(double k, Quantity<Tag> q) {
  return q * k;
}

struct BytesTag {};
struct SecondsTag {};
struct FlopsTag {};
struct BytesPerSecondTag {};
struct FlopsPerSecondTag {};

using Bytes = Quantity<BytesTag>;                    // bytes
using Seconds = Quantity<SecondsTag>;                // seconds
using Flops = Quantity<FlopsTag>;                    // floating-point operations
using BytesPerSecond = Quantity<BytesPerSecondTag>;  // bytes per second
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;  // FLOP/s

constexpr Seconds operator/(Bytes b, BytesPerSecond r) {
  return Seconds(b.value() / r.value());
}
constexpr Seconds operator/(Flops f, FlopsPerSecond r) {
  return Seconds(f.value() / r.value());
}
constexpr BytesPerSecond operator/(Bytes b, Seconds s) {
  return BytesPerSecond(b.value() / s.value());
}
constexpr Bytes operator*(BytesPerSecond r, Seconds s) {
  return Bytes(r.value() * s.value());
}

// ---- conversions from the units used in preset files and flags (decimal SI unless "i") ----
namespace units {
constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

constexpr Bytes gib(double v) {
  return Bytes(v * kGiB);
}
constexpr Bytes gb(double v) {
  return Bytes(v * 1e9);
}
constexpr Bytes mb(double v) {
  return Bytes(v * 1e6);
}
constexpr Bytes mib(double v) {
  return Bytes(v * kMiB);
}
// GB/s (decimal bytes) -> bytes/s.
constexpr BytesPerSecond gb_per_s(double v) {
  return BytesPerSecond(v * 1e9);
}
// Gbit/s (decimal bits, as NIC line rates are quoted) -> bytes/s.
constexpr BytesPerSecond gbit_per_s(double v) {
  return BytesPerSecond(v * 1e9 / 8.0);
}
constexpr double to_gbit_per_s(BytesPerSecond r) {
  return r.value() * 8.0 / 1e9;
}
constexpr double to_gb_per_s(BytesPerSecond r) {
  return r.value() / 1e9;
}
constexpr FlopsPerSecond tflop_per_s(double v) {
  return FlopsPerSecond(v * 1e12);
}
constexpr double to_tflop_per_s(FlopsPerSecond r) {
  return r.value() / 1e12;
}
constexpr Seconds us(double v) {
  return Seconds(v * 1e-6);
}
constexpr double to_us(Seconds s) {
  return s.value() * 1e6;
}
constexpr double to_gib(Bytes b) {
  return b.value() / kGiB;
}
// A converted quantity as a file should hold it: 15 significant digits, so that a conversion's
// last-bit error does not show as 24.999999999999996 and a written preset reads back to itself.
inline double for_file(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return std::strtod(buf, nullptr);
}
}  // namespace units

}  // namespace commscope
