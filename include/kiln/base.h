// <kiln/base.h>: status macros (KILN_RETURN_IF_ERROR, KILN_ASSIGN_OR_RETURN), file helpers
// (MakeDirs, WriteFileAtomically), exit codes, kiln's version. Abseil only. Part of kiln's public
// API (docs/library.md); the headers it includes are installed with it.
#pragma once

#include "lib/base/exit_code.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/base/version.h"
