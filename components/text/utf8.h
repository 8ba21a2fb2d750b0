// UTF-8 checks and splitting for text inputs: data files are validated once on reading (so an
// invalid byte is reported with its file and line), tokenizers then split valid text.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace kiln::text {

// The byte offset of the first invalid UTF-8 sequence in `text`, or npos when it is all valid.
size_t FindInvalidUtf8(std::string_view text);

// The bytes of the UTF-8 sequence at text[i]: a valid sequence's length (`valid` true), or else
// the length of the longest start of a valid sequence there, at least 1 (`valid` false; one
// U+FFFD in a lossy decoding, as Rust's from_utf8_lossy and Python's "replace" count them).
size_t Utf8SequenceAt(std::string_view text, size_t i, bool* valid);

// The code points of `text`, each as its bytes (an invalid byte stands alone).
std::vector<std::string_view> SplitCodePoints(std::string_view text);

}  // namespace kiln::text
