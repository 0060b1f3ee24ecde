#include "worker/input/zipf_sampler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "worker/input/feature_hash.h"

namespace dlrm::worker {
namespace {

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// log1p(x) / x, accurate near 0.
double Helper1(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

// expm1(x) / x, accurate near 0.
double Helper2(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x
                            : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (int i = 0; i < 4; ++i) {
    seed += 0x9e3779b97f4a7c15ULL;
    s_[i] = SplitMix64(seed);
  }
}

uint64_t Xoshiro256::NextU64() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Xoshiro256::NextGaussian() {
  const double u1 = 1.0 - NextDouble();  // (0, 1]
  const double u2 = NextDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

ZipfSampler::ZipfSampler(int64_t n, double exponent)
    : n_(std::max<int64_t>(n, 1)), exponent_(exponent) {
  h_integral_x1_ = HIntegral(1.5) - 1.0;
  h_integral_n_ = HIntegral(static_cast<double>(n_) + 0.5);
  s_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
}

int64_t ZipfSampler::Sample(Xoshiro256& rng) const {
  if (n_ == 1) return 1;
  while (true) {
    const double u = h_integral_n_ + rng.NextDouble() * (h_integral_x1_ - h_integral_n_);
    const double x = HIntegralInverse(u);
    int64_t k = static_cast<int64_t>(x + 0.5);
    k = std::clamp<int64_t>(k, 1, n_);
    if (k - x <= s_ || u >= HIntegral(k + 0.5) - H(static_cast<double>(k))) return k;
  }
}

double ZipfSampler::H(double x) const { return std::exp(-exponent_ * std::log(x)); }

double ZipfSampler::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Helper2((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::HIntegralInverse(double x) const {
  double t = x * (1.0 - exponent_);
  if (t < -1.0) t = -1.0;  // numerical guard, as in the reference implementation
  return std::exp(Helper1(t) * x);
}

}  // namespace dlrm::worker
