// Subcommands of `dlrm` that run the service's processes (coordinator, ps, worker, local).
#pragma once

#include <functional>

#include "CLI/CLI.hpp"

namespace dlrm {

// Adds `coordinator`, `ps`, `worker` and `local`; the chosen one sets *run.
void AddServiceCommands(CLI::App& app, std::function<int()>* run);

}  // namespace dlrm
