// `kiln report PATH... [-o report.html] [--title TEXT]`: one self-contained HTML page of the runs
// and sweeps under PATH. Needs no LibTorch: the engine is never loaded.
#pragma once

#include <string>
#include <vector>

namespace kiln::report {

// Runs the command with the arguments after `report`; returns the exit code (2 for bad input,
// with one line on stderr).
int RunReportCommand(const std::vector<std::string>& args);

// Prints "kiln: error: MESSAGE" on one line to stderr and returns the exit code for bad input (2);
// for this command and `kiln dashboard`.
int FailWithMessage(const std::string& message);

}  // namespace kiln::report
