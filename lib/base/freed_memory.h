// glibc malloc's freed memory: kept for reuse while training (KeepFreedMemoryForReuse), given
// back to the system at points the caller chooses (ReturnFreedMemory). A user's GLIBC_TUNABLES for
// malloc wins over both. docs/training.md ("Memory") says why.
#pragma once

namespace kiln {

// glibc malloc keeps freed memory for reuse: blocks up to 32 MiB come from the heap, which is
// never trimmed on its own (once per process).
void KeepFreedMemoryForReuse();
// Gives the memory glibc malloc keeps for reuse back to the system (malloc_trim), including the
// free pages inside the heap: once an epoch, so that a long run's RSS follows its live heap
// instead of growing with fragmentation, and after each block a model builds in pieces.
void ReturnFreedMemory();

}  // namespace kiln
