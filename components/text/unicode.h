// The Unicode the Hugging Face tokenizers need (components/text/hf_tokenizer.cc): UTF-8 to code
// points and back, general-category classes for their regexes and normalizers, lowercase, NFD and
// NFC. The data is generated from Python's unicodedata (unicode_tables.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text::unicode {

// The code points of `utf8`; an invalid sequence becomes U+FFFD (as Rust's from_utf8_lossy does).
std::u32string DecodeUtf8(std::string_view utf8);
void AppendUtf8(char32_t cp, std::string* out);
std::string EncodeUtf8(std::u32string_view text);

bool IsLetter(char32_t c);       // \p{L}
bool IsNumber(char32_t c);       // \p{N}
bool IsWhitespace(char32_t c);   // \s: the White_Space property
bool IsPunctuation(char32_t c);  // \p{P}
bool IsMarkNonspacing(char32_t c);
bool IsOther(char32_t c);  // \p{C} but surrogates (controls, formats, unassigned, private use)

// The lowercase of `c` (one to three code points) appended to `out`.
void AppendLowercase(char32_t c, std::u32string* out);
std::u32string Nfd(std::u32string_view text);
std::u32string Nfc(std::u32string_view text);

}  // namespace kiln::text::unicode
