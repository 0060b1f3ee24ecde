// The embedding tests' temporary directories (tests/common/temp_dir.h).
#pragma once

#include "tests/common/temp_dir.h"

namespace dlrm::embedding {

using ScopedTempDir = ::dlrm::testing::ScopedTempDir;

}  // namespace dlrm::embedding
