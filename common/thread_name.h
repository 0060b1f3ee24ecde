// Names the calling thread (as `top -H`, `perf report --sort comm` and gdb show it), so that a
// process's stages can be told apart: "dlrm-compute", "dlrm-fetch", ... Linux keeps 15
// characters; a longer name is cut there. Best effort: a failure is ignored.
#pragma once

#include <pthread.h>

#include <string>

namespace dlrm::common {

inline void NameThisThread(const std::string& name) {
  const std::string cut = name.substr(0, 15);
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace dlrm::common
