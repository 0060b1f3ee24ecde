#include "dense/parameter_buffer.h"

#include "common/logging.h"

namespace dlrm::dense {

ParameterBuffer::ParameterBuffer(Backend* backend, size_t count)
    : params_(backend, 1, static_cast<int>(count)), grads_(backend, 1, static_cast<int>(count)) {}

ParameterSlice ParameterBuffer::Slice(size_t offset, size_t count) {
  DLRM_CHECK(offset + count <= size())
      << "parameter slice [" << offset << ", " << offset + count << ") of " << size();
  return ParameterSlice{params_.data() + offset, grads_.data() + offset, count};
}

}  // namespace dlrm::dense
