// The Unicode data the Hugging Face tokenizers need (components/text/unicode.h reads it), generated
// from Python's unicodedata by scripts/gen_unicode_tables.py into unicode_tables.cc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::text::unicode {

// Bits of a code point's class.
enum ClassBits : uint8_t {
  kLetter = 1,          // L*
  kNumber = 2,          // N*
  kPunctuation = 4,     // P*
  kMarkNonspacing = 8,  // Mn
  kOther = 16,          // C* but surrogates: controls, formats, unassigned, private use
  kMark = 32,           // M*
};

// A run of code points with one value, from `start` to the next run's start.
struct ClassRun {
  uint32_t start;
  uint8_t value;
};
// A code point and what it maps to (up to 3 code points, 0-terminated when shorter).
struct Mapping {
  uint32_t cp;
  uint32_t to[3];
};

extern const ClassRun kClassRuns[];
extern const size_t kClassRunCount;
extern const Mapping kLowercase[];
extern const size_t kLowercaseCount;
extern const Mapping kCanonicalDecomposition[];
extern const size_t kCanonicalDecompositionCount;
extern const Mapping kComposition[];  // sorted by cp, the composite
extern const size_t kCompositionCount;
extern const ClassRun kCombiningClassRuns[];
extern const size_t kCombiningClassRunCount;

}  // namespace kiln::text::unicode
