#include "dense/tensor.h"

#include <utility>

#include "common/logging.h"

namespace dlrm::dense {

Tensor::Tensor(Backend* backend, int rows, int cols) : backend_(backend), rows_(rows), cols_(cols) {
  DLRM_CHECK(backend != nullptr && rows >= 0 && cols >= 0) << "tensor of " << rows << " x " << cols;
  if (size() > 0) {
    data_ = backend_->Allocate(size());
    backend_->Fill(data_, size(), 0.0f);
  }
}

Tensor::~Tensor() { Release(); }

Tensor::Tensor(Tensor&& other) noexcept
    : backend_(std::exchange(other.backend_, nullptr)),
      rows_(std::exchange(other.rows_, 0)),
      cols_(std::exchange(other.cols_, 0)),
      data_(std::exchange(other.data_, nullptr)) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    Release();
    backend_ = std::exchange(other.backend_, nullptr);
    rows_ = std::exchange(other.rows_, 0);
    cols_ = std::exchange(other.cols_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

void Tensor::Release() {
  if (data_ != nullptr) backend_->Deallocate(data_);
  data_ = nullptr;
}

std::vector<float> Tensor::ToHost() const {
  std::vector<float> host(size());
  if (!host.empty()) {
    backend_->CopyToHost(data_, host.data(), host.size());
    backend_->Synchronize();
  }
  return host;
}

void Tensor::CopyFromHost(absl::Span<const float> values) {
  DLRM_CHECK(values.size() == size())
      << "copying " << values.size() << " floats into a " << rows_ << " x " << cols_ << " tensor";
  if (!values.empty()) backend_->CopyFromHost(values.data(), data_, values.size());
}

void Tensor::Fill(float value) {
  if (size() > 0) backend_->Fill(data_, size(), value);
}

}  // namespace dlrm::dense
