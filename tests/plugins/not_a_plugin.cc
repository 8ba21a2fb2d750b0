// Test library: a shared library that is not a kiln plugin.
extern "C" __attribute__((visibility("default"))) int not_a_plugin_answer() { return 42; }
