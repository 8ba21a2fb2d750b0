// <kiln/registry.h>: registries of components by name (Registry<T>, KILN_REGISTER_BOUND), options
// declared once (OptionBinding, OptionSchema, Options). No LibTorch. Part of kiln's public API
// (docs/library.md); the headers it includes are installed with it.
#pragma once

#include "lib/registry/options.h"
#include "lib/registry/registry.h"
