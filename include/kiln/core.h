// <kiln/core.h>: status macros (KILN_RETURN_IF_ERROR, KILN_ASSIGN_OR_RETURN), file helpers
// (MakeDirs, WriteFileAtomically), exit codes, kiln's version. Abseil only. Part of kiln's public
// API (docs/library.md); the headers it includes are installed with it.
#pragma once

#include "lib/core/exit_code.h"
#include "lib/core/files.h"
#include "lib/core/status_macros.h"
#include "lib/core/version.h"
