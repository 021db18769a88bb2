// ptread (the tool) — `ptread stats`: per tensor min, max, mean, std and counts of NaN, +Inf,
// -Inf and zeros.
//
// As torch computes them on the values in float64 (t.double().min() ... .std(), unbiased):
// a NaN anywhere makes min, max, mean and std NaN; an infinity makes the mean infinite (or
// NaN) and std NaN; one element has std NaN; an empty tensor has mean and std NaN and no
// min or max (torch refuses them). Integer and bool tensors give exact integer min and max.
// Complex tensors are listed without values (torch has no min or max of them).
//
// Values are read once: a block of kBlock elements is summed, then its squared deviations
// from its own mean are summed while it is in cache, and blocks combine as Chan et al.'s
// parallel variance does. Large tensors are cut into pieces of kPiece elements that
// threads read side by side; pieces combine in order, so the result does not depend on the
// number of threads.
#pragma once

#include "args.hpp"
#include "filter.hpp"
#include "output.hpp"
#include "progress.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#endif

namespace ptread_cli {

struct StatsAcc {
  uint64_t n = 0;
  double sum = 0;   // the values' sum (the mean is sum / n, as torch's)
  double mean = 0;  // with m2: Chan's running mean and sum of squared deviations
  double m2 = 0;
  double fmin = std::numeric_limits<double>::infinity(), fmax = -std::numeric_limits<double>::infinity();
  int64_t imin = std::numeric_limits<int64_t>::max(), imax = std::numeric_limits<int64_t>::min();
  uint64_t umin = std::numeric_limits<uint64_t>::max(), umax = 0;
  uint64_t nan = 0, posinf = 0, neginf = 0, zeros = 0;

  void combine(const StatsAcc& b) {
    if (b.n == 0) return;
    if (n == 0) {
      *this = b;
      return;
    }
    const double na = static_cast<double>(n), nb = static_cast<double>(b.n), total = na + nb;
    const double delta = b.mean - mean;
    mean += delta * (nb / total);
    m2 += b.m2 + delta * delta * (na * nb / total);
    n += b.n;
    sum += b.sum;
    fmin = std::min(fmin, b.fmin);
    fmax = std::max(fmax, b.fmax);
    imin = std::min(imin, b.imin);
    imax = std::max(imax, b.imax);
    umin = std::min(umin, b.umin);
    umax = std::max(umax, b.umax);
    nan += b.nan;
    posinf += b.posinf;
    neginf += b.neginf;
    zeros += b.zeros;
  }
};

enum class StatsKind { floating, signed_int, unsigned_int, none };

inline StatsKind stats_kind(ptread::DType t) {
  using D = ptread::DType;
  switch (t) {
    case D::F16: case D::BF16: case D::F32: case D::F64: case D::F8_E4M3: case D::F8_E5M2:
      return StatsKind::floating;
    case D::I8: case D::I16: case D::I32: case D::I64:
      return StatsKind::signed_int;
    case D::BOOL: case D::U8: case D::U16: case D::U32: case D::U64:
      return StatsKind::unsigned_int;
    default:
      return StatsKind::none;
  }
}

// Element k of contiguous data of dtype t, as a double (exact for every dtype but 64-bit
// integers beyond 2^53, whose min and max are kept exactly beside).
template <ptread::DType T>
inline double load_value(const uint8_t* p, size_t k) {
  using D = ptread::DType;
  if constexpr (T == D::F32) {
    float v;
    std::memcpy(&v, p + 4 * k, 4);
    return v;
  } else if constexpr (T == D::F64) {
    double v;
    std::memcpy(&v, p + 8 * k, 8);
    return v;
  } else if constexpr (T == D::F16 || T == D::BF16) {
    uint16_t h;
    std::memcpy(&h, p + 2 * k, 2);
    return T == D::F16 ? ptread::detail::f16_to_float(h) : ptread::detail::bf16_to_float(h);
  } else if constexpr (T == D::F8_E4M3 || T == D::F8_E5M2) {
    return ptread::detail::fp8_to_float(p[k], T);
  } else {
    using E = std::conditional_t<T == D::I8, int8_t, std::conditional_t<T == D::I16, int16_t,
              std::conditional_t<T == D::I32, int32_t, std::conditional_t<T == D::I64, int64_t,
              std::conditional_t<T == D::U16, uint16_t, std::conditional_t<T == D::U32, uint32_t,
              std::conditional_t<T == D::U64, uint64_t, uint8_t>>>>>>>;
    E v;
    std::memcpy(&v, p + sizeof(E) * k, sizeof(E));
    if constexpr (T == D::BOOL) return v != 0 ? 1.0 : 0.0;
    return static_cast<double>(v);
  }
}

template <ptread::DType T>
inline void exact_minmax(const uint8_t* p, size_t k, StatsAcc* a) {
  using D = ptread::DType;
  if constexpr (T == D::I64) {
    int64_t v;
    std::memcpy(&v, p + 8 * k, 8);
    a->imin = std::min(a->imin, v);
    a->imax = std::max(a->imax, v);
  } else if constexpr (T == D::U64) {
    uint64_t v;
    std::memcpy(&v, p + 8 * k, 8);
    a->umin = std::min(a->umin, v);
    a->umax = std::max(a->umax, v);
  } else {
    (void)p, (void)k, (void)a;
  }
}

constexpr size_t kStatsBlock = 1024;

// Elements [begin, end) of contiguous data.
template <ptread::DType T>
StatsAcc stats_range(const uint8_t* data, size_t begin, size_t end) {
  StatsAcc total;
  double x[kStatsBlock];
  for (size_t b = begin; b < end; b += kStatsBlock) {
    const size_t n = std::min(kStatsBlock, end - b);
    StatsAcc a;
    a.n = n;
    double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    uint64_t nan = 0, pinf = 0, ninf = 0, zero = 0;
    for (size_t k = 0; k < n; ++k) {
      const double v = load_value<T>(data, b + k);
      x[k] = v;
      sum += v;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      nan += v != v;
      pinf += v == std::numeric_limits<double>::infinity();
      ninf += v == -std::numeric_limits<double>::infinity();
      zero += v == 0;
      exact_minmax<T>(data, b + k, &a);
    }
    const double mean = sum / static_cast<double>(n);
    double m2 = 0;
    for (size_t k = 0; k < n; ++k) m2 += (x[k] - mean) * (x[k] - mean);
    a.sum = sum;
    a.mean = mean;
    a.m2 = m2;
    a.fmin = lo;
    a.fmax = hi;
    a.nan = nan;
    a.posinf = pinf;
    a.neginf = ninf;
    a.zeros = zero;
    total.combine(a);
  }
  return total;
}

// The float dtypes' path: each block as floats (F16 and BF16 widened by the library's vector
// kernels), then passes the compiler vectorizes: min and max as minps/maxps do them (a NaN
// is counted apart), the counts as integer sums, the sums in eight float64 lanes.
inline StatsAcc stats_floats(const uint8_t* data, ptread::DType t, size_t begin, size_t end) {
  constexpr size_t kLanes = 8;
  const auto widen = t == ptread::DType::F32 ? nullptr : ptread::detail::nn_kernels(t).widen;
  const size_t es = ptread::dtype_size(t);
  alignas(64) float buf[kStatsBlock];
  StatsAcc total;
  for (size_t b = begin; b < end; b += kStatsBlock) {
    const size_t n = std::min(kStatsBlock, end - b);
    const float* x = buf;
    if (widen != nullptr) {
      widen(data + b * es, buf, n);
    } else if (reinterpret_cast<uintptr_t>(data + b * es) % alignof(float) == 0) {
      x = reinterpret_cast<const float*>(data + b * es);
    } else {
      std::memcpy(buf, data + b * es, n * es);
    }
    // Every quantity kept per lane: the lanes of one step are independent, so the step
    // becomes vector instructions (no reduction to reorder).
    float lo[kLanes], hi[kLanes];
    std::fill(lo, lo + kLanes, std::numeric_limits<float>::infinity());
    std::fill(hi, hi + kLanes, -std::numeric_limits<float>::infinity());
    uint32_t nan[kLanes] = {}, pinf[kLanes] = {}, ninf[kLanes] = {}, zero[kLanes] = {};
    double lane[kLanes] = {};
    auto step = [&](size_t j, float v) {
      lo[j] = v < lo[j] ? v : lo[j];
      hi[j] = v > hi[j] ? v : hi[j];
      nan[j] += v != v;
      pinf[j] += v == std::numeric_limits<float>::infinity();
      ninf[j] += v == -std::numeric_limits<float>::infinity();
      zero[j] += v == 0.0f;
      lane[j] += static_cast<double>(v);
    };
    size_t k = 0;
#if defined(__SSE2__) || defined(_M_X64)
    // (The compiler does not make vectors of the step above: the same, four floats a step,
    // and float64 sums in two pairs of lanes. minps keeps its second operand for a NaN, as
    // the step's comparison does.)
    {
      __m128 vlo = _mm_set1_ps(lo[0]), vhi = _mm_set1_ps(hi[0]);
      const __m128 inf = _mm_set1_ps(std::numeric_limits<float>::infinity()), minf = _mm_sub_ps(_mm_setzero_ps(), inf);
      __m128i cnan = _mm_setzero_si128(), cpinf = cnan, cninf = cnan, czero = cnan;
      __m128d s0 = _mm_setzero_pd(), s1 = s0;
      for (; k + 4 <= n; k += 4) {
        const __m128 v = _mm_loadu_ps(x + k);
        vlo = _mm_min_ps(v, vlo);
        vhi = _mm_max_ps(v, vhi);
        cnan = _mm_sub_epi32(cnan, _mm_castps_si128(_mm_cmpunord_ps(v, v)));
        cpinf = _mm_sub_epi32(cpinf, _mm_castps_si128(_mm_cmpeq_ps(v, inf)));
        cninf = _mm_sub_epi32(cninf, _mm_castps_si128(_mm_cmpeq_ps(v, minf)));
        czero = _mm_sub_epi32(czero, _mm_castps_si128(_mm_cmpeq_ps(v, _mm_setzero_ps())));
        s0 = _mm_add_pd(s0, _mm_cvtps_pd(v));
        s1 = _mm_add_pd(s1, _mm_cvtps_pd(_mm_movehl_ps(v, v)));
      }
      _mm_storeu_ps(lo, vlo);
      _mm_storeu_ps(hi, vhi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(nan), cnan);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pinf), cpinf);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ninf), cninf);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(zero), czero);
      _mm_storeu_pd(lane, s0);
      _mm_storeu_pd(lane + 2, s1);
    }
#endif
    for (; k + kLanes <= n; k += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) step(j, x[k + j]);
    }
    for (; k < n; ++k) step(k % kLanes, x[k]);
    double sum = 0;
    for (double l : lane) sum += l;
    const double mean = sum / static_cast<double>(n);
    double dev[kLanes] = {};
    k = 0;
    for (; k + kLanes <= n; k += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) {
        const double d = static_cast<double>(x[k + j]) - mean;
        dev[j] += d * d;
      }
    }
    for (; k < n; ++k) {
      const double d = static_cast<double>(x[k]) - mean;
      dev[k % kLanes] += d * d;
    }
    StatsAcc a;
    a.n = n;
    a.sum = sum;
    a.mean = mean;
    for (size_t j = 0; j < kLanes; ++j) {
      a.m2 += dev[j];
      a.fmin = std::min(a.fmin, static_cast<double>(lo[j]));
      a.fmax = std::max(a.fmax, static_cast<double>(hi[j]));
      a.nan += nan[j];
      a.posinf += pinf[j];
      a.neginf += ninf[j];
      a.zeros += zero[j];
    }
    total.combine(a);
  }
  return total;
}

inline StatsAcc stats_of(const uint8_t* data, ptread::DType t, size_t begin, size_t end) {
  using D = ptread::DType;
  switch (t) {
    case D::F32: case D::F16: case D::BF16: return stats_floats(data, t, begin, end);
    case D::F64: return stats_range<D::F64>(data, begin, end);
    case D::F8_E4M3: return stats_range<D::F8_E4M3>(data, begin, end);
    case D::F8_E5M2: return stats_range<D::F8_E5M2>(data, begin, end);
    case D::I8: return stats_range<D::I8>(data, begin, end);
    case D::I16: return stats_range<D::I16>(data, begin, end);
    case D::I32: return stats_range<D::I32>(data, begin, end);
    case D::I64: return stats_range<D::I64>(data, begin, end);
    case D::U8: return stats_range<D::U8>(data, begin, end);
    case D::U16: return stats_range<D::U16>(data, begin, end);
    case D::U32: return stats_range<D::U32>(data, begin, end);
    case D::U64: return stats_range<D::U64>(data, begin, end);
    case D::BOOL: return stats_range<D::BOOL>(data, begin, end);
    default: return {};
  }
}

// A double as JSON: the shortest text that reads back to it; NaN and infinities as strings.
inline void append_json_double(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "\"nan\"";
  } else if (std::isinf(v)) {
    out += v > 0 ? "\"inf\"" : "\"-inf\"";
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
    if (std::find_if(buf, r.ptr, [](char c) { return c == '.' || c == 'e'; }) == r.ptr) out += ".0";
  }
}

inline std::string table_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

struct TensorStats {
  std::string name;
  ptread::DType dtype = ptread::DType::F32;
  std::vector<int64_t> shape;
  StatsKind kind = StatsKind::none;
  StatsAcc acc;
  std::string error;  // the tensor could not be read (its values, or a contiguous copy)

  bool has_minmax() const { return kind != StatsKind::none && acc.n > 0; }
  bool any_nan() const { return acc.nan > 0; }
  double mean() const { return acc.n == 0 || any_nan() ? std::nan("") : acc.sum / static_cast<double>(acc.n); }
  double stddev() const {
    if (acc.n < 2 || any_nan() || acc.posinf || acc.neginf) return std::nan("");
    return std::sqrt(acc.m2 / static_cast<double>(acc.n - 1));
  }
  // min or max as text: an integer for integer dtypes, else as append_json_double / table.
  std::string bound(bool max, bool json) const {
    if (kind == StatsKind::floating) {
      const double v = any_nan() ? std::nan("") : max ? acc.fmax : acc.fmin;
      if (!json) return table_double(v);
      std::string s;
      append_json_double(s, v);
      return s;
    }
    if (dtype == ptread::DType::I64) return std::to_string(max ? acc.imax : acc.imin);
    if (dtype == ptread::DType::U64) return std::to_string(max ? acc.umax : acc.umin);
    if (dtype == ptread::DType::BOOL && !json) return (max ? acc.fmax : acc.fmin) != 0 ? "True" : "False";
    if (dtype == ptread::DType::BOOL) return (max ? acc.fmax : acc.fmin) != 0 ? "true" : "false";
    return std::to_string(static_cast<int64_t>(max ? acc.fmax : acc.fmin));
  }
};

// The stats of the tensors, read by `threads` threads; progress: bytes read so far, total.
template <class Progress>
std::vector<TensorStats> compute_stats(const std::vector<const ptread::NamedTensor*>& tensors, unsigned threads,
                                       Progress&& progress) {
  constexpr size_t kPiece = size_t{1} << 22;  // elements a task reads
  std::vector<TensorStats> out(tensors.size());
  std::vector<ptread::Tensor> data(tensors.size());  // contiguous values
  struct Task {
    size_t tensor, begin, end;
  };
  std::vector<Task> tasks;
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ptread::Tensor& t = tensors[i]->tensor;
    TensorStats& s = out[i];
    s.name = tensors[i]->name;
    s.dtype = t.dtype();
    s.shape.assign(t.shape().begin(), t.shape().end());
    s.kind = stats_kind(t.dtype());
    if (s.kind == StatsKind::none) continue;
    auto c = t.contiguous();
    if (!c) {
      s.error = c.error().what();
      s.kind = StatsKind::none;
      continue;
    }
    data[i] = std::move(*c);
    const size_t n = static_cast<size_t>(data[i].numel());
    total_bytes += data[i].nbytes();
    for (size_t b = 0; b < n; b += kPiece) tasks.push_back({i, b, std::min(n, b + kPiece)});
  }
  std::vector<StatsAcc> piece(tasks.size());
  const size_t wave = std::max<size_t>(1, 4 * static_cast<size_t>(threads));
  uint64_t done = 0;
  for (size_t first = 0; first < tasks.size(); first += wave) {
    const size_t count = std::min(wave, tasks.size() - first);
    ptread::detail::parallel_for(threads, count, [&](size_t k) {
      const Task& task = tasks[first + k];
      const ptread::Tensor& t = data[task.tensor];
      piece[first + k] = stats_of(static_cast<const uint8_t*>(t.data_ptr()), t.dtype(), task.begin, task.end);
    });
    for (size_t k = 0; k < count; ++k) {
      const Task& task = tasks[first + k];
      done += static_cast<uint64_t>(task.end - task.begin) * ptread::dtype_size(data[task.tensor].dtype());
    }
    progress(done, total_bytes);
  }
  for (size_t k = 0; k < tasks.size(); ++k) out[tasks[k].tensor].acc.combine(piece[k]);
  return out;
}

inline std::string stats_json(const std::vector<TensorStats>& stats) {
  std::string out = "{\n  \"tensors\": [";
  for (size_t i = 0; i < stats.size(); ++i) {
    const TensorStats& s = stats[i];
    out += i ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, s.name);
    out += ", \"dtype\": \"";
    out += ptread::dtype_name(s.dtype);
    out += "\", \"shape\": ";
    append_dims(out, s.shape);
    const bool values = s.kind != StatsKind::none;
    out += ", \"min\": " + (s.has_minmax() ? s.bound(false, true) : std::string("null"));
    out += ", \"max\": " + (s.has_minmax() ? s.bound(true, true) : std::string("null"));
    out += ", \"mean\": ";
    if (values) {
      append_json_double(out, s.mean());
    } else {
      out += "null";
    }
    out += ", \"std\": ";
    if (values) {
      append_json_double(out, s.stddev());
    } else {
      out += "null";
    }
    for (const auto& [key, v] : {std::pair<const char*, uint64_t>{"nan", s.acc.nan}, {"posinf", s.acc.posinf},
                                 {"neginf", s.acc.neginf}, {"zeros", s.acc.zeros}}) {
      out += ", \"";
      out += key;
      out += "\": ";
      if (values) {
        append_u64(out, v);
      } else {
        out += "null";
      }
    }
    if (!s.error.empty()) {
      out += ", \"error\": ";
      append_json_string(out, s.error);
    }
    out += '}';
  }
  out += stats.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

inline std::string stats_table(const std::vector<TensorStats>& stats) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "DTYPE", "SHAPE", "MIN", "MAX", "MEAN", "STD", "NAN", "+INF", "-INF", "ZEROS"});
  for (const TensorStats& s : stats) {
    std::string shape;
    append_dims(shape, s.shape);
    const bool values = s.kind != StatsKind::none;
    const char* none = s.error.empty() ? "-" : "error";
    rows.push_back({display(s.name), ptread::dtype_name(s.dtype), shape, s.has_minmax() ? s.bound(false, false) : none,
                    s.has_minmax() ? s.bound(true, false) : none, values ? table_double(s.mean()) : none,
                    values ? table_double(s.stddev()) : none, values ? std::to_string(s.acc.nan) : none,
                    values ? std::to_string(s.acc.posinf) : none, values ? std::to_string(s.acc.neginf) : none,
                    values ? std::to_string(s.acc.zeros) : none});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], columns(r[c]));
  }
  std::string out;
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) {
      const bool right = c >= 3;  // numbers align right
      if (right) pad_to(out, columns(r[c]), width[c]);
      out += r[c];
      if (c + 1 < r.size()) {
        if (!right) pad_to(out, columns(r[c]), width[c]);
        out += "  ";
      }
    }
    out += '\n';
  }
  for (const TensorStats& s : stats) {
    if (!s.error.empty()) out += "ptread: " + display(s.name) + ": " + s.error + "\n";
  }
  return out;
}

// `ptread stats`: the tensors named (all when none is), kept by the filters, in file order.
inline int stats(const ptread::Checkpoint& ck, const Args& args) {
  std::vector<const ptread::NamedTensor*> chosen;
  const std::vector<std::string> names(args.files.begin() + 1, args.files.end());
  for (const std::string& name : names) {
    if (ck.find(name) == nullptr) {
      std::fprintf(stderr, "ptread: no tensor is named %s\n", display(name).c_str());
      return kExitFailed;
    }
  }
  for (const auto& nt : ck.tensors()) {
    if (!names.empty() && std::find(names.begin(), names.end(), nt.name) == names.end()) continue;
    if (args.filter.keep(nt.name)) chosen.push_back(&nt);
  }
  ProgressLine progress;
  const auto stats = compute_stats(chosen, ptread::detail::resolve_threads(0),
                                   [&progress](uint64_t done, uint64_t total) { progress.update(done, total); });
  progress.finish();
  return finish_stdout(args.json ? stats_json(stats) : stats_table(stats));
}

}  // namespace ptread_cli
