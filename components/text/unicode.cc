#include "components/text/unicode.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "components/text/unicode_tables.h"
#include "components/text/utf8.h"

namespace kiln::text::unicode {
namespace {

uint8_t RunValue(const ClassRun* runs, size_t n, char32_t c) {
  const ClassRun* end = runs + n;
  const ClassRun* it =
      std::upper_bound(runs, end, static_cast<uint32_t>(c),
                       [](uint32_t v, const ClassRun& run) { return v < run.start; });
  return it == runs ? 0 : (it - 1)->value;
}

uint8_t ClassOf(char32_t c) {
  if (c < 0x80) {
    static const auto* ascii = [] {
      auto* table = new uint8_t[128];
      for (char32_t a = 0; a < 128; ++a) table[a] = RunValue(kClassRuns, kClassRunCount, a);
      return table;
    }();
    return ascii[c];
  }
  return RunValue(kClassRuns, kClassRunCount, c);
}

const Mapping* Find(const Mapping* table, size_t n, char32_t c) {
  const Mapping* end = table + n;
  const Mapping* it = std::lower_bound(table, end, static_cast<uint32_t>(c),
                                       [](const Mapping& m, uint32_t v) { return m.cp < v; });
  return it != end && it->cp == c ? it : nullptr;
}

int CombiningClass(char32_t c) {
  if (c < 0x300) return 0;
  return RunValue(kCombiningClassRuns, kCombiningClassRunCount, c);
}

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void Decompose(char32_t c, std::u32string* out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Mapping* m = Find(kCanonicalDecomposition, kCanonicalDecompositionCount, c);
  if (m == nullptr) {
    out->push_back(c);
    return;
  }
  for (uint32_t to : m->to) {
    if (to == 0) break;
    Decompose(to, out);
  }
}

char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  static const auto* pairs = [] {
    auto* map = new std::unordered_map<uint64_t, char32_t>();
    for (size_t i = 0; i < kCompositionCount; ++i) {
      (*map)[(uint64_t{kComposition[i].to[0]} << 32) | kComposition[i].to[1]] = kComposition[i].cp;
    }
    return map;
  }();
  auto it = pairs->find((uint64_t{a} << 32) | b);
  return it == pairs->end() ? 0 : it->second;
}

}  // namespace

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    bool valid = false;
    const size_t n = Utf8SequenceAt(s, i, &valid);
    if (!valid) {
      out.push_back(0xFFFD);
    } else {
      const auto lead = static_cast<unsigned char>(s[i]);
      char32_t cp = n == 1 ? lead : lead & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      out.push_back(cp);
    }
    i += n;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) AppendUtf8(c, &out);
  return out;
}

bool IsLetter(char32_t c) { return ClassOf(c) & kLetter; }
bool IsNumber(char32_t c) { return ClassOf(c) & kNumber; }
bool IsPunctuation(char32_t c) { return ClassOf(c) & kPunctuation; }
bool IsMarkNonspacing(char32_t c) { return ClassOf(c) & kMarkNonspacing; }
bool IsOther(char32_t c) { return ClassOf(c) & kOther; }

bool IsWhitespace(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || c == 0x20;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

void AppendLowercase(char32_t c, std::u32string* out) {
  if (c < 0x80) {
    out->push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  const Mapping* m = Find(kLowercase, kLowercaseCount, c);
  if (m == nullptr) {
    out->push_back(c);
    return;
  }
  for (uint32_t to : m->to) {
    if (to == 0) break;
    out->push_back(to);
  }
}

std::u32string Nfd(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c < 0xC0) {
      out.push_back(c);
    } else {
      Decompose(c, &out);
    }
  }
  // Canonical order: each run of non-starters sorted (stably) by combining class.
  size_t i = 0;
  while (i < out.size()) {
    if (CombiningClass(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && CombiningClass(out[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                       out.begin() + static_cast<std::ptrdiff_t>(j), [](char32_t a, char32_t b) {
                         return CombiningClass(a) < CombiningClass(b);
                       });
    }
    i = j;
  }
  return out;
}

std::u32string Nfc(std::u32string_view text) {
  const std::u32string d = Nfd(text);
  std::u32string out;
  out.reserve(d.size());
  std::ptrdiff_t starter = -1;
  int last = -1;  // the combining class of the last character after the starter (-1: none)
  for (char32_t c : d) {
    const int cc = CombiningClass(c);
    if (starter >= 0 && (last == -1 || (last != 0 && last < cc))) {
      if (char32_t composed = Compose(out[static_cast<size_t>(starter)], c); composed != 0) {
        out[static_cast<size_t>(starter)] = composed;
        continue;
      }
    }
    if (cc == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size());
      last = -1;
    } else {
      last = cc;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace kiln::text::unicode
