// ptread (the tool) — `ptread diff A B`: are two checkpoints the same tensors?
//
// Tensors are matched by name (the filters apply). A name in one file only is listed as
// such; a tensor whose dtype or shape differs is changed, its values not compared; the
// others are compared element by element, in C order: without tolerances bit for bit (so
// 0.0 and -0.0 differ, and a NaN equals a NaN of the same bits); with --atol/--rtol as
// torch.isclose compares (a == b, or |a - b| <= atol + |rtol * b| with the difference
// finite; NaN equal to NaN only with --equal-nan; the tolerance one leaves out is torch's
// default, 1e-08 or 1e-05), computed in float32 for float32, float16 and bfloat16 tensors
// and in float64 for the others (complex tensors: bit for bit always). A changed tensor
// reports its mismatched elements, the first one's index, and the largest |a - b| and
// |a - b| / |b| over the mismatched elements where each is a number (x / 0 is inf). Values are read
// in pieces through the mapping: neither file is held in memory.
// Exit: 0 the same, 1 different, 2 trouble (a file that cannot be read, wrong usage).
#pragma once

#include "args.hpp"
#include "output.hpp"
#include "stats.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ptread_cli {

struct TensorDiff {
  std::string name;
  ptread::DType dtype_a = ptread::DType::F32, dtype_b = ptread::DType::F32;
  std::vector<int64_t> shape_a, shape_b;
  bool compared = false;  // same dtype and shape: values compared
  uint64_t numel = 0, mismatched = 0;
  double max_abs = 0, max_rel = 0;  // over mismatched elements with a numeric difference
  bool has_diff = false, has_rel = false;  // some mismatched element had a number for them
  std::vector<int64_t> first;       // the first mismatched element's index
  std::string error;                // the values could not be read
};

struct DiffResult {
  std::vector<std::string> only_in_a, only_in_b;
  std::vector<TensorDiff> changed;
  size_t same = 0;
  bool differ() const { return !only_in_a.empty() || !only_in_b.empty() || !changed.empty(); }
};

// Element of dtype t at p as a double (stats.hpp's load_value), NaN for dtypes it has none for.
inline double element_as_double(const uint8_t* p, ptread::DType t) {
  using D = ptread::DType;
  switch (t) {
    case D::F32: return load_value<D::F32>(p, 0);
    case D::F64: return load_value<D::F64>(p, 0);
    case D::F16: return load_value<D::F16>(p, 0);
    case D::BF16: return load_value<D::BF16>(p, 0);
    case D::F8_E4M3: return load_value<D::F8_E4M3>(p, 0);
    case D::F8_E5M2: return load_value<D::F8_E5M2>(p, 0);
    case D::I8: return load_value<D::I8>(p, 0);
    case D::I16: return load_value<D::I16>(p, 0);
    case D::I32: return load_value<D::I32>(p, 0);
    case D::I64: return load_value<D::I64>(p, 0);
    case D::U8: return load_value<D::U8>(p, 0);
    case D::U16: return load_value<D::U16>(p, 0);
    case D::U32: return load_value<D::U32>(p, 0);
    case D::U64: return load_value<D::U64>(p, 0);
    case D::BOOL: return load_value<D::BOOL>(p, 0);
    default: return std::nan("");
  }
}

// torch.isclose of one pair, in T (float or double).
template <class T>
bool isclose(T a, T b, T atol, T rtol, bool equal_nan) {
  if (a == b) return true;
  if (equal_nan && a != a && b != b) return true;
  const T actual = std::abs(a - b);
  return std::isfinite(actual) && actual <= atol + std::abs(rtol * b);
}

struct DiffOptions {
  std::optional<double> atol, rtol;
  bool equal_nan = false;
  bool tolerant() const { return atol || rtol; }
};

// Compares two tensors of one dtype and shape into d.
inline void compare_values(const ptread::Tensor& ta, const ptread::Tensor& tb, const DiffOptions& o, TensorDiff* d) {
  auto ca = ta.contiguous();
  auto cb = tb.contiguous();
  if (!ca || !cb) {
    d->error = !ca ? ca.error().what() : cb.error().what();
    return;
  }
  const auto* a = static_cast<const uint8_t*>(ca->data_ptr());
  const auto* b = static_cast<const uint8_t*>(cb->data_ptr());
  const size_t es = ca->element_size(), n = static_cast<size_t>(ca->numel());
  d->numel = n;
  const ptread::DType t = ca->dtype();
  const bool complex = t == ptread::DType::C32 || t == ptread::DType::C64 || t == ptread::DType::C128;
  const bool tolerant = o.tolerant() && !complex;
  const bool in_float = t == ptread::DType::F32 || t == ptread::DType::F16 || t == ptread::DType::BF16;
  const double atol = o.atol.value_or(1e-08), rtol = o.rtol.value_or(1e-05);
  // Equal bits are equal values, but for NaN under tolerances without --equal-nan
  // (torch.isclose: NaN is not close to NaN): then every element is tested.
  const bool equal_bits_same = !(tolerant && !o.equal_nan && stats_kind(t) == StatsKind::floating);
  constexpr size_t kPiece = size_t{1} << 16;  // elements compared with one memcmp first
  uint64_t first_at = std::numeric_limits<uint64_t>::max();
  for (size_t begin = 0; begin < n; begin += kPiece) {
    const size_t count = std::min(kPiece, n - begin);
    if (equal_bits_same && std::memcmp(a + begin * es, b + begin * es, count * es) == 0) continue;
    for (size_t k = begin; k < begin + count; ++k) {
      const uint8_t* pa = a + k * es;
      const uint8_t* pb = b + k * es;
      if (equal_bits_same && std::memcmp(pa, pb, es) == 0) continue;
      const double x = complex ? std::nan("") : element_as_double(pa, t), y = complex ? std::nan("") : element_as_double(pb, t);
      if (tolerant) {
        const bool close = in_float ? isclose<float>(static_cast<float>(x), static_cast<float>(y), static_cast<float>(atol),
                                                     static_cast<float>(rtol), o.equal_nan)
                                    : isclose<double>(x, y, atol, rtol, o.equal_nan);
        if (close) continue;
      }
      ++d->mismatched;
      if (first_at == std::numeric_limits<uint64_t>::max()) first_at = k;
      const double diff = std::abs(x - y), rel = diff / std::abs(y);  // (x / 0: inf; 0 / 0: NaN)
      if (diff == diff) {
        d->has_diff = true;
        d->max_abs = std::max(d->max_abs, diff);
      }
      if (rel == rel) {
        d->has_rel = true;
        d->max_rel = std::max(d->max_rel, rel);
      }
    }
  }
  if (d->mismatched) {  // the flat position as an index
    const ptread::Dims shape = ca->shape();
    d->first.assign(shape.size(), 0);
    uint64_t rest = first_at;
    for (size_t i = shape.size(); i-- > 0;) {
      const auto extent = static_cast<uint64_t>(shape[i]);
      d->first[i] = static_cast<int64_t>(rest % extent);
      rest /= extent;
    }
  }
}

inline DiffResult diff_checkpoints(const ptread::Checkpoint& a, const ptread::Checkpoint& b, const NameFilter& filter,
                                   const DiffOptions& o) {
  DiffResult r;
  std::unordered_map<std::string, const ptread::NamedTensor*> in_b;
  for (const auto& nt : b.tensors()) {
    if (filter.keep(nt.name)) in_b.emplace(nt.name, &nt);  // (a repeated name: the first)
  }
  std::unordered_set<std::string> seen;
  for (const auto& nt : a.tensors()) {
    if (!filter.keep(nt.name) || !seen.insert(nt.name).second) continue;
    const auto it = in_b.find(nt.name);
    if (it == in_b.end()) {
      r.only_in_a.push_back(nt.name);
      continue;
    }
    const ptread::Tensor& tb = it->second->tensor;
    TensorDiff d;
    d.name = nt.name;
    d.dtype_a = nt.tensor.dtype();
    d.dtype_b = tb.dtype();
    d.shape_a.assign(nt.tensor.shape().begin(), nt.tensor.shape().end());
    d.shape_b.assign(tb.shape().begin(), tb.shape().end());
    if (d.dtype_a == d.dtype_b && d.shape_a == d.shape_b) {
      d.compared = true;
      compare_values(nt.tensor, tb, o, &d);
      if (d.mismatched == 0 && d.error.empty()) {
        ++r.same;
        continue;
      }
    }
    r.changed.push_back(std::move(d));
  }
  for (const auto& nt : b.tensors()) {
    if (filter.keep(nt.name) && seen.insert(nt.name).second) {
      r.only_in_b.push_back(nt.name);
    }
  }
  return r;
}

inline std::string diff_json(const DiffResult& r) {
  std::string out = "{\n  \"only_in_a\": [";
  for (size_t k = 0; k < r.only_in_a.size(); ++k) {
    if (k) out += ", ";
    append_json_string(out, r.only_in_a[k]);
  }
  out += "],\n  \"only_in_b\": [";
  for (size_t k = 0; k < r.only_in_b.size(); ++k) {
    if (k) out += ", ";
    append_json_string(out, r.only_in_b[k]);
  }
  out += "],\n  \"changed\": [";
  for (size_t k = 0; k < r.changed.size(); ++k) {
    const TensorDiff& d = r.changed[k];
    out += k ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, d.name);
    out += ", \"a\": {\"dtype\": \"" + std::string(ptread::dtype_name(d.dtype_a)) + "\", \"shape\": ";
    append_dims(out, d.shape_a);
    out += "}, \"b\": {\"dtype\": \"" + std::string(ptread::dtype_name(d.dtype_b)) + "\", \"shape\": ";
    append_dims(out, d.shape_b);
    out += "}";
    auto number = [&out](const char* key, double v, bool present) {
      out += ", \"";
      out += key;
      out += "\": ";
      if (present) {
        append_json_double(out, v);
      } else {
        out += "null";
      }
    };
    const bool values = d.compared && d.error.empty();
    number("max_abs_diff", d.max_abs, values && d.has_diff);
    number("max_rel_diff", d.max_rel, values && d.has_rel);
    out += ", \"mismatched\": " + (values ? std::to_string(d.mismatched) : std::string("null"));
    out += ", \"numel\": " + (values ? std::to_string(d.numel) : std::string("null"));
    out += ", \"first_mismatch\": ";
    if (values) {
      append_dims(out, d.first);
    } else {
      out += "null";
    }
    if (!d.error.empty()) {
      out += ", \"error\": ";
      append_json_string(out, d.error);
    }
    out += '}';
  }
  out += r.changed.empty() ? "],\n" : "\n  ],\n";
  out += "  \"same\": " + std::to_string(r.same) + "\n}\n";
  return out;
}

inline std::string diff_text(const DiffResult& r) {
  std::string out;
  for (const auto& n : r.only_in_a) out += "only in A: " + display(n) + "\n";
  for (const auto& n : r.only_in_b) out += "only in B: " + display(n) + "\n";
  for (const auto& d : r.changed) {
    out += "changed: " + display(d.name) + ": ";
    if (!d.compared) {
      std::string sa, sb;
      append_dims(sa, d.shape_a);
      append_dims(sb, d.shape_b);
      out += std::string(ptread::dtype_name(d.dtype_a)) + sa + " -> " + ptread::dtype_name(d.dtype_b) + sb + "\n";
      continue;
    }
    if (!d.error.empty()) {
      out += "cannot compare: " + d.error + "\n";
      continue;
    }
    std::string at;
    append_dims(at, d.first);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%llu of %llu elements differ, first at %s", static_cast<unsigned long long>(d.mismatched),
                  static_cast<unsigned long long>(d.numel), at.c_str());
    out += buf;
    if (d.has_diff) {
      std::snprintf(buf, sizeof buf, "; max abs diff %.6g", d.max_abs);
      out += buf;
    }
    if (d.has_rel) {
      std::snprintf(buf, sizeof buf, ", max rel diff %.6g", d.max_rel);
      out += buf;
    }
    out += "\n";
  }
  out += std::to_string(r.same) + " the same, " + std::to_string(r.changed.size()) + " changed, " +
         std::to_string(r.only_in_a.size()) + " only in A, " + std::to_string(r.only_in_b.size()) + " only in B\n";
  return out;
}

// `ptread diff A B`: the exit status (0 same, 1 different, 2 trouble).
inline int diff(const ptread::Checkpoint& a, const Args& args) {
  ptread::Options options;
  options.mode = args.mode;
  auto b = ptread::Checkpoint::open(args.files[1], options);
  if (!b) {
    std::fprintf(stderr, "ptread: %s\n", b.error().what());
    return kExitUsage;
  }
  DiffOptions o;
  o.atol = args.atol;
  o.rtol = args.rtol;
  o.equal_nan = args.equal_nan;
  const DiffResult r = diff_checkpoints(a, *b, args.filter, o);
  if (finish_stdout(args.json ? diff_json(r) : diff_text(r)) != kExitOk) return kExitUsage;
  return r.differ() ? kExitFailed : kExitOk;
}

}  // namespace ptread_cli
