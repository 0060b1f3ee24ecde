// Tensor: an owning, move-only [rows x cols] row-major float matrix in a Backend's memory.
//
// The Backend is not owned and must outlive the tensor (it is kept to free the memory). A
// default-constructed tensor is empty (rows = cols = 0, data() = nullptr).
#pragma once

#include <cstddef>
#include <vector>

#include "absl/types/span.h"
#include "dense/backend.h"

namespace dlrm::dense {

class Tensor {
 public:
  Tensor() = default;
  // Allocates rows * cols floats on `backend`, filled with zeros.
  Tensor(Backend* backend, int rows, int cols);
  ~Tensor();

  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  size_t size() const { return static_cast<size_t>(rows_) * cols_; }
  bool empty() const { return size() == 0; }
  Backend* backend() const { return backend_; }

  // Backend memory (a device pointer on CUDA).
  float* data() { return data_; }
  const float* data() const { return data_; }
  // Start of row `r` (0 <= r < rows).
  float* row(int r) { return data_ + static_cast<size_t>(r) * cols_; }
  const float* row(int r) const { return data_ + static_cast<size_t>(r) * cols_; }

  // Copies the whole tensor to a host vector (synchronising the backend).
  std::vector<float> ToHost() const;
  // Copies host values into the tensor; values.size() must equal size() (checked).
  void CopyFromHost(absl::Span<const float> values);
  void Fill(float value);

 private:
  void Release();

  Backend* backend_ = nullptr;
  int rows_ = 0;
  int cols_ = 0;
  float* data_ = nullptr;
};

}  // namespace dlrm::dense
