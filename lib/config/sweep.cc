#include "lib/config/sweep.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/config/repository.h"

namespace kiln::config {
namespace {

// More values than any sweep can run; also stops range(0,1e300,1e-300) from running forever.
constexpr size_t kMaxRangeValues = 1000000;

// Just enough of Python's decimal.Decimal for Hydra's FloatRange: exact conversion from a
// double or an integer, addition rounded to the default context (28 significant digits,
// ROUND_HALF_EVEN), comparison, and float() (correctly rounded).
// Value: (-1)^negative * digits * 10^exponent; `digits` has no leading zeros ("0" for zero).
struct Decimal {
  bool negative = false;
  std::string digits = "0";
  int exponent = 0;

  static Decimal FromInt(int64_t v) {
    Decimal d;
    d.negative = v < 0;
    uint64_t m = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    d.digits = std::to_string(m);
    return d;
  }

  // Exact, as Decimal(float): a double is m * 2^e, and 2^-k = 5^k * 10^-k.
  static Decimal FromDouble(double v) {
    Decimal d;
    d.negative = std::signbit(v);
    int e = 0;
    double frac = std::frexp(std::fabs(v), &e);  // v = frac * 2^e, frac in [0.5, 1)
    uint64_t m = static_cast<uint64_t>(std::ldexp(frac, 53));
    e -= 53;
    while (m != 0 && (m & 1) == 0 && e < 0) {
      m >>= 1;
      ++e;
    }
    d.digits = std::to_string(m);
    for (; e > 0; --e) MultiplySmall(&d.digits, 2);
    for (; e < 0; ++e) {
      MultiplySmall(&d.digits, 5);
      --d.exponent;
    }
    return d;
  }

  static void MultiplySmall(std::string* digits, int factor) {
    int carry = 0;
    for (size_t i = digits->size(); i-- > 0;) {
      int v = ((*digits)[i] - '0') * factor + carry;
      (*digits)[i] = static_cast<char>('0' + v % 10);
      carry = v / 10;
    }
    while (carry > 0) {
      digits->insert(digits->begin(), static_cast<char>('0' + carry % 10));
      carry /= 10;
    }
  }

  static void StripLeadingZeros(std::string* digits) {
    size_t nz = digits->find_first_not_of('0');
    digits->erase(0, nz == std::string::npos ? digits->size() - 1 : nz);
  }

  static int CompareMagnitude(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
    return a.compare(b) < 0 ? -1 : (a.compare(b) > 0 ? 1 : 0);
  }

  // The exact sum.
  static Decimal ExactAdd(Decimal a, Decimal b) {
    int e = std::min(a.exponent, b.exponent);
    a.digits.append(a.exponent - e, '0');
    b.digits.append(b.exponent - e, '0');
    size_t n = std::max(a.digits.size(), b.digits.size());
    a.digits.insert(0, n - a.digits.size(), '0');
    b.digits.insert(0, n - b.digits.size(), '0');
    Decimal out;
    out.exponent = e;
    out.digits.assign(n + 1, '0');
    if (a.negative == b.negative) {
      int carry = 0;
      for (size_t i = n; i-- > 0;) {
        int v = (a.digits[i] - '0') + (b.digits[i] - '0') + carry;
        out.digits[i + 1] = static_cast<char>('0' + v % 10);
        carry = v / 10;
      }
      out.digits[0] = static_cast<char>('0' + carry);
      out.negative = a.negative;
    } else {
      if (CompareMagnitude(a.digits, b.digits) < 0) std::swap(a, b);
      int borrow = 0;
      for (size_t i = n; i-- > 0;) {
        int v = (a.digits[i] - '0') - (b.digits[i] - '0') - borrow;
        borrow = v < 0 ? 1 : 0;
        out.digits[i + 1] = static_cast<char>('0' + v + 10 * borrow);
      }
      out.negative = a.negative;
    }
    StripLeadingZeros(&out.digits);
    if (out.digits == "0") out.negative = false;  // x + (-x) is +0 under ROUND_HALF_EVEN
    return out;
  }

  // a + b rounded to 28 significant digits, half to even, as Python's default context.
  static Decimal Add(const Decimal& a, const Decimal& b) {
    Decimal out = ExactAdd(a, b);
    constexpr size_t kPrecision = 28;
    if (out.digits.size() <= kPrecision) return out;
    size_t drop = out.digits.size() - kPrecision;
    std::string kept = out.digits.substr(0, kPrecision);
    std::string rest = out.digits.substr(kPrecision);
    out.exponent += static_cast<int>(drop);
    bool round_up = false;
    if (rest[0] > '5') {
      round_up = true;
    } else if (rest[0] == '5') {
      bool beyond = rest.find_first_not_of('0', 1) != std::string::npos;
      round_up = beyond || ((kept.back() - '0') % 2 == 1);
    }
    if (round_up) {
      size_t i = kept.size();
      while (i > 0 && kept[i - 1] == '9') kept[--i] = '0';
      if (i == 0) {
        kept.insert(kept.begin(), '1');
        kept.pop_back();
        ++out.exponent;
      } else {
        ++kept[i - 1];
      }
    }
    out.digits = kept;
    return out;
  }

  // -1, 0 or 1 as a <, ==, > b.
  static int Compare(const Decimal& a, const Decimal& b) {
    Decimal minus_b = b;
    minus_b.negative = !b.negative;
    Decimal diff = ExactAdd(a, minus_b);
    if (diff.digits == "0") return 0;
    return diff.negative ? -1 : 1;
  }

  double ToDouble() const {
    std::string text = absl::StrCat(negative ? "-" : "", digits, "e", exponent);
    return std::strtod(text.c_str(), nullptr);
  }
};

Decimal ToDecimal(const Node& n) {
  return n.kind() == NodeKind::kInt ? Decimal::FromInt(n.as_int())
                                    : Decimal::FromDouble(n.as_float());
}

absl::StatusOr<std::vector<OverrideValue>> SweepValues(const Override& o,
                                                       const ConfigRepository& repo) {
  const Sweep& sweep = o.sweep;
  std::vector<OverrideValue> values;
  switch (sweep.kind) {
    case SweepKind::kChoice: values = sweep.choices; break;
    case SweepKind::kRange: {
      const Node& start = *sweep.range_start;
      const Node& stop = *sweep.range_stop;
      const Node& step = *sweep.range_step;
      auto too_many = [&]() {
        return absl::InvalidArgumentError(absl::StrCat(
            "range() in '", o.input_line, "' gives more than ", kMaxRangeValues, " values"));
      };
      if (start.kind() == NodeKind::kInt && stop.kind() == NodeKind::kInt &&
          step.kind() == NodeKind::kInt) {
        int64_t s = start.as_int(), e = stop.as_int(), d = step.as_int();
        for (int64_t v = s; d > 0 ? v < e : v > e; v += d) {
          if (values.size() == kMaxRangeValues) return too_many();
          values.push_back({Node::Int(v)});
          if ((d > 0 && v > INT64_MAX - d) || (d < 0 && v < INT64_MIN - d)) break;
        }
      } else {
        for (const Node* n : {&start, &stop, &step}) {
          if (n->kind() == NodeKind::kFloat && !std::isfinite(n->as_float())) {
            return absl::InvalidArgumentError(
                absl::StrCat("range() in '", o.input_line, "' needs finite numbers"));
          }
        }
        // Hydra's FloatRange: Decimal(start), then Decimal additions of Decimal(step), each
        // value converted with float(). Decimal(0.1) is the double's exact value, so the values
        // are not always the "clean" ones (range(0,3,0.3) ends 2.6999999999999997, 3.0).
        Decimal v = ToDecimal(start), e = ToDecimal(stop), d = ToDecimal(step);
        int direction = Decimal::Compare(d, Decimal::FromInt(0));
        while (direction != 0 && Decimal::Compare(v, e) == direction * -1) {
          if (values.size() == kMaxRangeValues) return too_many();
          values.push_back({Node::Float(v.ToDouble())});
          v = Decimal::Add(v, d);
        }
      }
      break;
    }
    case SweepKind::kGlob: {
      if (!repo.GroupExists(o.key_or_group)) {
        return absl::InvalidArgumentError(absl::StrCat("glob() in '", o.input_line,
                                                       "' needs a config group, and '",
                                                       o.key_or_group, "' is not one"));
      }
      for (const auto& option : repo.GroupOptions(o.key_or_group)) {
        auto matches = [&](const std::vector<std::string>& patterns) {
          return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) {
            return fnmatch(p.c_str(), option.c_str(), 0) == 0;
          });
        };
        if (matches(sweep.glob_include) && !matches(sweep.glob_exclude)) {
          values.push_back({Node::String(option)});
        }
      }
      break;
    }
    case SweepKind::kInterval:
      return absl::InvalidArgumentError(
          absl::StrCat("the basic sweeper cannot sweep over interval() in '", o.input_line,
                       "': it needs a sweeper that samples (use choice() or range())"));
    case SweepKind::kNone: break;
  }
  if (sweep.sort) {
    bool numbers = std::all_of(values.begin(), values.end(), [](const OverrideValue& v) {
      return v.node->kind() == NodeKind::kInt || v.node->kind() == NodeKind::kFloat;
    });
    std::stable_sort(
        values.begin(), values.end(), [&](const OverrideValue& a, const OverrideValue& b) {
          bool less = numbers ? NumberValue(*a.node) < NumberValue(*b.node)
                              : NodeToOverrideString(*a.node) < NodeToOverrideString(*b.node);
          bool greater = numbers ? NumberValue(*b.node) < NumberValue(*a.node)
                                 : NodeToOverrideString(*b.node) < NodeToOverrideString(*a.node);
          return sweep.sort_reverse ? greater : less;
        });
  }
  if (sweep.shuffle)
    std::shuffle(values.begin(), values.end(), std::mt19937(std::random_device{}()));
  return values;
}

}  // namespace

absl::StatusOr<std::vector<Override>> ParseSweepParams(const NodePtr& p) {
  std::vector<Override> params;
  if (p == nullptr || p->is_null()) return params;
  for (const auto& [key, value] : p->entries()) {
    std::string text =
        KeyText(key) + "=" +
        (value->kind() == NodeKind::kString ? value->as_string() : NodeToOverrideString(*value));
    auto o = ParseOverride(text);
    if (!o.ok()) return o.status();
    params.push_back(*std::move(o));
  }
  return params;
}

std::vector<Override> MergeSweepOverrides(const std::vector<Override>& params,
                                          const std::vector<Override>& overrides) {
  std::vector<Override> merged;
  auto add = [&](const Override& o) {
    for (auto& m : merged) {
      if (m.KeyElement() == o.KeyElement()) {
        m = o;
        return;
      }
    }
    merged.push_back(o);
  };
  for (const auto& o : params) add(o);
  for (const auto& o : overrides) add(o);
  return merged;
}

absl::StatusOr<std::vector<std::vector<std::string>>> PlanSweep(
    const std::vector<Override>& params, const std::vector<Override>& overrides,
    const ConfigRepository& repo) {
  std::vector<std::pair<std::string, std::vector<std::string>>> lists;
  for (const auto& o : MergeSweepOverrides(params, overrides)) {
    std::string key = o.KeyElement();
    if (o.is_sweep()) {
      auto values = SweepValues(o, repo);
      if (!values.ok()) return values.status();
      std::vector<std::string> lines;
      for (const auto& v : *values) lines.push_back(key + "=" + OverrideValueToString(v));
      lists.emplace_back(key, std::move(lines));
    } else if (!o.has_value) {
      lists.emplace_back(key,
                         std::vector<std::string>{
                             key + "=null"});  // as Hydra writes a delete without a value: ~c=null
    } else {
      lists.emplace_back(key, std::vector<std::string>{key + "=" + OverrideValueToString(o.value)});
    }
  }
  std::vector<std::vector<std::string>> jobs = {{}};
  for (const auto& [key, lines] : lists) {
    std::vector<std::vector<std::string>> next;
    for (const auto& job : jobs) {
      for (const auto& line : lines) {
        auto extended = job;
        extended.push_back(line);
        next.push_back(std::move(extended));
      }
    }
    jobs = std::move(next);
  }
  return jobs;
}

}  // namespace kiln::config
