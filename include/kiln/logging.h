// <kiln/logging.h>: kiln's logger (the lines every command writes).
// Part of kiln's public API (docs/library.md); the headers it includes are installed with it.
#pragma once

#include "lib/logging/logger.h"
