// Installs common/terminate_handler.h's handler before main in every dlrm executable. Linked into
// each as an object file: a static library's member would be dropped since nothing refers to it.
#include <errno.h>  // program_invocation_short_name (GNU)

#include "common/terminate_handler.h"

namespace {

[[maybe_unused]] const bool terminate_handler_installed =
    (dlrm::common::InstallTerminateHandler(program_invocation_short_name), true);

}  // namespace
