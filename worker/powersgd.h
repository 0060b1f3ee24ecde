// PowerSgdAllReducer: the dense gradients' allreduce of CPU workers, compressed by PowerSGD
// (Vogels, Karimireddy and Jaggi, NeurIPS 2019; PyTorch DDP's powerSGD_hook), for
// `training.dense_sync_compression: powersgd`. Each weight matrix M (rows x cols) large enough to
// gain travels as two rank-r factors instead of rows x cols values:
//
//   M' = M + E                          (E: what earlier steps' approximations left out)
//   P  = M' Q;   P = allreduce_sum(P);  orthonormalise P's columns
//   Q  = M'^T P; Q = allreduce_sum(Q) / world
//   M  = P Q^T   (the approximation of the mean of M' over the workers);  E = M' - M
//
// Q starts from the same random numbers on every worker and is reused from step to step (one
// power-iteration step per training step). Every worker ends with the same P and Q, so with the
// same approximation. Biases and matrices with rows * cols < 2 (rows + cols) r travel whole, in
// one allreduce with the factors P. So a step makes two allreduces. With r >= min(rows, cols) the
// approximation is the mean itself, up to rounding.
//
// E and Q are per-worker training state: a cluster checkpoint holds each rank's (StateBytes, as
// powersgd-rR.bin; docs/CHECKPOINTS.md), and a job resumed with the same number of workers and
// the same rank carries on from them (LoadState), so that it trains as if it never stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "dense/backend.h"
#include "dense/dlrm_model.h"
#include "worker/collective.h"

namespace dlrm::worker {

class PowerSgdAllReducer {
 public:
  // `matrices`: the weight matrices of a buffer of n gradients (DlrmDenseModel::WeightMatrices);
  // `backend` (a CPU backend) runs the products. Neither is owned. `seed` must be the same on
  // every worker. A matrix is compressed when rows * cols >= min_compression_rate times the
  // (rows + cols) * rank floats of its factors (DDP's min_compression_rate, 2 by default).
  PowerSgdAllReducer(Collectives* reducer, dense::Backend* backend,
                     std::vector<dense::DlrmDenseModel::WeightMatrix> matrices, size_t n, int rank,
                     uint64_t seed, double min_compression_rate = 2.0);

  // grads (n floats, host memory) becomes the approximated mean over the workers: compressed
  // matrices as above, everything else exactly. Every worker calls it with its own gradients.
  absl::Status AllReduceMean(float* grads);

  // Floats each call sends into the allreduces, against n uncompressed.
  size_t wire_floats() const { return first_.size() + second_.size(); }
  int compressed_matrices() const { return static_cast<int>(compressed_.size()); }
  // E laid out like the gradients (zero where they travel whole): what the approximations so far
  // have left out, to be added to the next step's gradients.
  std::vector<float> Residual() const;

  // Every compressed matrix's Q and E with the layout they fit (docs/CHECKPOINTS.md,
  // powersgd-rR.bin): "DLRMPSGD" | u32 version 1 | u32 rank | u64 gradients | u32 matrices | u32 0,
  // then per matrix u64 offset | u32 rows | u32 cols | Q (cols x rank f32) | E (rows x cols f32).
  std::string StateBytes() const;
  // Takes back StateBytes' output. FAILED_PRECONDITION naming the difference when it was written
  // for another rank or other matrices (a changed spec: the state stays as it was); DATA_LOSS
  // when the bytes are not a whole state. `what` (a file name) starts every message.
  absl::Status LoadState(std::string_view bytes, const std::string& what);

 private:
  struct Compressed {
    size_t offset;  // in grads
    int rows;
    int cols;
    std::vector<float> q;      // cols x r, reused across steps
    std::vector<float> error;  // rows x cols
    size_t p_at;               // where its P sits in first_
    size_t q_at;               // where its Q sits in second_
  };
  static void Orthonormalise(float* p, int rows, int r);

  Collectives* const reducer_;
  dense::Backend* const backend_;
  const size_t n_;
  const int rank_;
  std::vector<Compressed> compressed_;
  std::vector<std::pair<size_t, size_t>> whole_;  // [begin, end) ranges sent uncompressed
  std::vector<float> first_;                      // every P, then the whole ranges
  std::vector<float> second_;                     // every Q
};

}  // namespace dlrm::worker
