// Flushes denormals in the main thread before any shared library's initialiser runs, so that
// every thread of the process inherits the mode (common/denormals.h says why). Linked into each
// executable as an object file: an entry of .preinit_array is only run from the executable itself,
// and a static library's member would be dropped since nothing refers to it.
//
// The dynamic loader runs the executable's .preinit_array before the initialisers of the shared
// libraries it loaded (OpenBLAS creates its worker threads in its own). The environment is read
// from the third argument: getenv does not see it yet at this point.

#include <cstring>

#include "common/denormals.h"

namespace {

bool KeepDenormals(char** envp) {
  constexpr char kKeep[] = "DLRM_DENORMALS=keep";
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strcmp(*e, kKeep) == 0) return true;
  }
  return false;
}

void FlushDenormalsAtStart(int /*argc*/, char** /*argv*/, char** envp) {
  if (!KeepDenormals(envp)) dlrm::common::FlushDenormalsInThisThread();
}

}  // namespace

__attribute__((section(".preinit_array"),
               used)) static void (*const flush_denormals_at_start)(int, char**,
                                                                    char**) = FlushDenormalsAtStart;
