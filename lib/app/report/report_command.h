// `kiln report PATH... [-o report.html] [--title TEXT]`: one self-contained HTML page of the runs
// and sweeps under PATH. Needs no LibTorch: the engine is never loaded.
#pragma once

#include <string>
#include <vector>

namespace kiln::app::report {

// Runs the command with the arguments after `report`; returns the exit code (2 for bad input,
// with one line on stderr).
int RunReportCommand(const std::vector<std::string>& args);

}  // namespace kiln::app::report
