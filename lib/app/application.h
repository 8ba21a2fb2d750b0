// The `kiln` program as a library function, so tests and other front-ends can run it:
// compose the config, answer --cfg/--info/--help, plan sweeps, create run directories and
// run the command's job through a launcher. User mistakes end in one line and exit code 2.
#pragma once

#include <string>
#include <vector>

#include "lib/run/command.h"

namespace kiln::app {

// Runs kiln with argv[1..]; returns the process exit code.
int RunApplication(const std::vector<std::string>& args);

}  // namespace kiln::app
