// <kiln/core.h>: the name <kiln/base.h> had in kiln 0.1.0 and before (the folder lib/core is now
// lib/base, as its target Kiln::base). Kept for plugins written against it until the version after
// 0.1.0 (docs/plugins.md); include <kiln/base.h>.
#pragma once

#include <kiln/base.h>
