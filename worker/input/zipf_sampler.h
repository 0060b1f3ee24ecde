// Zipf sampling and a small deterministic PRNG, shared by the synthetic data generator and by
// tests/benchmarks that need Criteo-like skew.
#pragma once

#include <cstdint>

namespace dlrm::worker {

// xoshiro256** (Blackman, Vigna), seeded through splitmix64. Fully specified here, so a seed gives
// the same stream on every platform (unlike std:: distributions).
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t NextU64();
  // Uniform in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller, one value per call).
  double NextGaussian();

 private:
  uint64_t s_[4];
};

// Samples k in [1, n] with P(k) proportional to k^-exponent by rejection-inversion (Hörmann and
// Derflinger 1996, as in Apache Commons RNG): O(1) memory and expected O(1) time for any n, so a
// 10M-row table costs the same as a 10-row one. Requires n >= 1 and exponent > 0.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double exponent);
  int64_t Sample(Xoshiro256& rng) const;

 private:
  double H(double x) const;
  double HIntegral(double x) const;
  double HIntegralInverse(double x) const;

  int64_t n_;
  double exponent_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

}  // namespace dlrm::worker
