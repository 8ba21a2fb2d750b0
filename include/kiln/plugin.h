// <kiln/plugin.h>: what a plugin shared library defines: KILN_PLUGIN and the Registrar that adds
// components, sweepers, launchers and resolvers; and LoadPlugin / InspectPlugin, to load one into
// your program. Part of kiln's public API (docs/library.md); the headers it includes are installed
// with it.
#pragma once

#include "lib/registry/plugin.h"
#include "lib/registry/plugin_loader.h"
