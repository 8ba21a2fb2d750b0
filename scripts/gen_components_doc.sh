#!/usr/bin/env bash
# Regenerates docs/components.md from the registry (`kiln list --markdown`). The test
# plugin_test.ComponentsDocIsUpToDate fails when the committed page differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KILN_PLUGIN_PATH= "${KILN:-build/bin/kiln}" list --markdown > docs/components.md
echo "wrote docs/components.md"
