// ptread — Python's dict semantics for the dicts (and sets) a pickle builds. The pickle VM
// appends every key it is given (DICT, SETITEM, SETITEMS, OrderedDict and Counter
// arguments; FROZENSET, ADDITEMS, set(...)); Python stores d[k] = v, so a key given twice
// keeps its first place and takes the last value (a set keeps an item once), and
// keys compare as Python compares them: 1 == 1.0 == True, -0.0 == 0, str != bytes, tuples
// item by item, frozensets as sets, a class by its name, anything else by identity (a NaN
// equals only itself). A key Python cannot hash (a list, dict or set, or a tuple or
// frozenset holding one) makes torch.load fail: here it is an error naming it.
// torch.save never writes a key twice; crafted files do, and a reader that kept both would
// show other tensors than torch.load gives.
#pragma once

#include "../memory/flat_map.hpp"
#include "value_graph.hpp"

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ptread {
namespace detail {

// The key walks (here and the VM's hashable check) recurse, one level a nested tuple or
// frozenset: at most Limits::max_nesting_depth levels, and never more than this.
inline constexpr size_t kMaxKeyNesting = 4096;

class DictKeys {
 public:
  // pool: where the tables of large dicts come from (the pickle VM's: memory its reserve has
  // faulted in already, and that the model's names reuse after). One DictKeys serves all
  // the dicts of a pickle: their walks share one budget.
  DictKeys(const Graph& g, BlockPool& pool, size_t max_depth)
      : g_(g), pool_(pool), max_depth_(std::min(max_depth, kMaxKeyNesting)) {}

  // Removes the repeated keys of dict node d (first place, last value), or the repeated
  // items of set or frozenset node d (the first kept). Up to 16 keys are compared pair by
  // pair; more go through a hash table (of the low halves of the keys' hashes; slots: key
  // indexes). The fast hashes have a fixed key: keys a file crafted to share their low bits
  // would make one run of slots that every key walks (quadratic), so a key that lands past
  // StringIndex::kMaxDistance slots from its home makes this pickle's dicts hash under
  // keyed_hash from then on (keyed_: strings, bytes and class names keyed, every hash
  // keyed at the end, tuples combined keyed), and the table is made again.
  Status dedup(Graph& g, uint32_t d) {
    Node& n = g.nodes[d];
    const bool dict = n.kind == ValueKind::dict;
    if (!dict && n.kind != ValueKind::set && n.kind != ValueKind::frozenset) return {};
    const uint32_t w = dict ? 2 : 1;  // items a key: key and value, or the item
    const uint32_t pairs = n.ref / w;  // keys (one key: is it hashable?)
    if (pairs == 0) return {};
    budget_ += 256 * size_t{pairs};
    uint32_t* it = n.items;
    uint32_t small[16];
    uint32_t* const hashes = pairs <= 16 ? small : static_cast<uint32_t*>(pool_.allocate(pairs * sizeof(uint32_t)));
    PTREAD_CHECK(hash_keys(it, w, pairs, hashes));
    first_.clear();  // made when a key repeats: per key, the earlier key it repeats, or kNoNode
    if (pairs <= 16) {
      for (uint32_t k = 1; k < pairs; ++k) {
        for (uint32_t j = 0; j < k; ++j) {
          if (hashes[j] != hashes[k] || (!first_.empty() && first_[j] != kNoNode)) continue;
          PTREAD_TRY(bool same, equal(it[w * j], it[w * k]));
          if (same) {
            repeats(k, j, pairs);
            break;
          }
        }
      }
    } else {
      PTREAD_TRY(bool indexed, find_repeats(it, w, pairs, hashes));
      if (!indexed) {  // a flood: this dict and the later ones hash under the process's key
        keyed_ = true;
        hashes_.clear();
        PTREAD_CHECK(hash_keys(it, w, pairs, hashes));
        first_.clear();
        PTREAD_TRY(indexed, find_repeats(it, w, pairs, hashes));
      }
    }
    if (first_.empty()) return {};
    // d[k] = v: the value goes to the key's first place (a key that repeats none, moved
    // already: first_[k] < k); the repeat is dropped. s.add(k): dropped.
    place_.resize(pairs);
    uint32_t out = 0;
    for (uint32_t k = 0; k < pairs; ++k) {
      if (first_[k] != kNoNode) {
        if (dict) it[2 * place_[first_[k]] + 1] = it[2 * k + 1];
        continue;
      }
      place_[k] = out;
      for (uint32_t j = 0; j < w; ++j) it[w * out + j] = it[w * k + j];
      ++out;
    }
    n.ref = w * out;
    return {};
  }

  // The keys hash under keyed_hash (a flood was seen in a dict of this pickle).
  bool keyed() const noexcept { return keyed_; }

  // hash(key), consistent with equal(); an error for keys Python cannot hash.
  Result<uint64_t> hash(uint32_t k, size_t depth = 0) {
    const Node& n = g_.nodes[k];
    if (n.kind == ValueKind::tuple || n.kind == ValueKind::frozenset) {
      // Kept where it took 16 steps or more: a tuple shared by many keys (or twice in one:
      // t(k+1) = (tk, tk)) is hashed once.
      if (!hashes_.empty()) {
        const auto known = hashes_.find(k);
        if (known != hashes_.end()) return known->second;
      }
      const size_t before = budget_;
      PTREAD_TRY(uint64_t h, hash_items(n, depth));
      if (before - budget_ >= 16) hashes_.emplace(k, h);
      return h;
    }
    switch (n.kind) {
      case ValueKind::none: return uint64_t{0x6e6f6e65};
      case ValueKind::boolean: case ValueKind::integer: return mix(static_cast<uint64_t>(n.i));
      case ValueKind::floating: {
        int64_t i = 0;
        if (float_as_int64(n.f, &i)) return mix(static_cast<uint64_t>(i));
        if (std::isfinite(n.f) && n.f == std::floor(n.f)) return big_hash(float_bytes(n.f));  // beyond 64 bits, as big ints
        uint64_t bits;
        std::memcpy(&bits, &n.f, sizeof bits);
        return mix(bits ^ 0x666c6f6174ull);
      }
      case ValueKind::big_integer: return big_hash(minimal_le(g_.text(k)));
      case ValueKind::string: return text_hash(g_.text(k));
      case ValueKind::bytes: return mix(text_hash(g_.text(k)) ^ 0x6279746573ull);
      case ValueKind::global: return mix(text_hash(g_.global_module(k)) ^ (text_hash(g_.global_name(k)) << 1));
      case ValueKind::storage: return mix(uint64_t{n.ref} ^ 0x73746f72ull << 32);
      case ValueKind::list: case ValueKind::dict: case ValueKind::set:
        return make_error(ErrorCode::pickle_malformed, std::string("a ") + value_kind_name(n.kind) +
                                                           " as a dict key (unhashable in Python: torch.load fails on it)");
      default: return mix(uint64_t{k} ^ 0x6964ull << 48);  // objects, tensors ...: by identity
    }
  }

  // key a == key b, as Python's dict decides (identity first, then ==).
  Result<bool> equal(uint32_t a, uint32_t b, size_t depth = 0) {
    if (a == b) return true;
    if (!spend()) return over_budget();
    const Node& x = g_.nodes[a];
    const Node& y = g_.nodes[b];
    if (numeric(x.kind) && numeric(y.kind)) return numbers_equal(a, b);
    if (x.kind != y.kind) return false;
    switch (x.kind) {
      case ValueKind::none: return true;
      case ValueKind::string: case ValueKind::bytes: return g_.text(a) == g_.text(b);
      case ValueKind::global: return g_.global_module(a) == g_.global_module(b) && g_.global_name(a) == g_.global_name(b);
      case ValueKind::storage: return x.ref == y.ref;  // torch.load gives one storage object per key
      case ValueKind::tuple:
        if (x.ref != y.ref) return false;
        if (depth >= max_depth_) return too_deep();
        for (uint32_t j = 0; j < x.ref; ++j) {
          PTREAD_TRY(bool same, equal(x.items[j], y.items[j], depth + 1));
          if (!same) return false;
        }
        return true;
      case ValueKind::frozenset: {
        if (depth >= max_depth_) return too_deep();
        PTREAD_TRY(bool ab, contains_all(a, b, depth + 1));
        if (!ab) return false;
        return contains_all(b, a, depth + 1);
      }
      default: return false;  // by identity
    }
  }

 private:
  // An int beyond 64 bits, by its minimal two's complement bytes (a float of its value
  // gives the same).
  uint64_t big_hash(std::string_view bytes) const noexcept { return mix(text_hash(bytes) ^ 0x626967696e74ull); }

  // A tuple's items in order; a frozenset's as a set: the graph may hold an item twice
  // (FROZENSET of 1, 1.0 is {1}) and in any order, so its hash combines the distinct
  // hashes of its items, sorted (equal items hash alike; equal() compares them as sets).
  Result<uint64_t> hash_items(const Node& n, size_t depth) {
    if (depth >= max_depth_) return too_deep();
    const bool tuple = n.kind == ValueKind::tuple;
    uint64_t h = mix(uint64_t{n.ref} ^ 0x7475ull << 40);
    std::vector<uint64_t> items;  // a frozenset's item hashes (frozenset keys are rare)
    if (!tuple) items.reserve(n.ref);
    for (uint32_t j = 0; j < n.ref; ++j) {
      if (!spend()) return over_budget();
      PTREAD_TRY(uint64_t e, hash(n.items[j], depth + 1));
      if (!tuple) {
        items.push_back(e);
        continue;
      }
      h = keyed_ ? keyed_hash(h ^ e) : mix(h ^ e);
    }
    if (tuple) return h;
    std::sort(items.begin(), items.end());
    h = mix(0x66726f7a656eull);  // not the item count: {1, 1} == {1}
    for (size_t j = 0; j < items.size(); ++j) {
      if (j > 0 && items[j] == items[j - 1]) continue;
      h = keyed_ ? keyed_hash(h ^ items[j]) : mix(h ^ items[j]);
    }
    return h;
  }

  // The low halves of the hashes of the pairs keys at it[0], it[w], ...
  Status hash_keys(const uint32_t* it, uint32_t w, uint32_t pairs, uint32_t* hashes) {
    for (uint32_t k = 0; k < pairs; ++k) {
      const Node& key = g_.nodes[it[w * k]];
      if (PTREAD_LIKELY(key.kind == ValueKind::string && key.ref != kLongText && !keyed_)) {  // hash()'s, inline
        hashes[k] = static_cast<uint32_t>(hash_string(std::string_view(key.text, key.ref)));
      } else {
        PTREAD_TRY(uint64_t h, hash(it[w * k]));
        hashes[k] = static_cast<uint32_t>(keyed_ ? keyed_hash(h) : h);
      }
    }
    return {};
  }

  // Finds the keys that repeat an earlier one through a table; false (before keyed_) when a
  // key would land more than StringIndex::kMaxDistance slots from its home.
  Result<bool> find_repeats(const uint32_t* it, uint32_t w, uint32_t pairs, const uint32_t* hashes) {
    size_t cap = 32;
    while (cap < 2 * size_t{pairs}) cap *= 2;
    uint32_t* const slots = static_cast<uint32_t*>(pool_.allocate(cap * sizeof(uint32_t)));  // keys that repeat none, by hash
    std::fill(slots, slots + cap, kNoNode);
    const size_t mask = cap - 1;
    constexpr uint32_t kAhead = 8;  // the slots are random accesses into a table larger than L1
    for (uint32_t k = 0; k < pairs; ++k) {
      if (k + kAhead < pairs) __builtin_prefetch(&slots[hashes[k + kAhead] & mask], 1);
      size_t passed = 0;  // slots taken, from the key's home slot
      for (size_t s = hashes[k] & mask;; s = (s + 1) & mask) {
        const uint32_t j = slots[s];
        if (j == kNoNode) {
          slots[s] = k;
          break;
        }
        if (PTREAD_UNLIKELY(++passed > StringIndex::kMaxDistance)) {
          if (!keyed_) return false;
          if (!spend()) return over_budget();  // even so (never seen: the key is secret)
        }
        if (hashes[j] != hashes[k]) continue;
        PTREAD_TRY(bool same, equal(it[w * j], it[w * k]));
        if (same) {
          repeats(k, j, pairs);
          break;
        }
      }
    }
    return true;
  }

  void repeats(uint32_t k, uint32_t j, uint32_t pairs) {
    if (first_.empty()) first_.assign(pairs, kNoNode);
    first_[k] = j;
  }

  uint64_t text_hash(std::string_view s) const noexcept { return keyed_ ? keyed_hash(s) : hash_string(s); }
  static uint64_t mix(uint64_t h) noexcept { return fmix64(h); }
  static bool numeric(ValueKind k) noexcept {
    return k == ValueKind::boolean || k == ValueKind::integer || k == ValueKind::big_integer || k == ValueKind::floating;
  }
  // f as an int64 when it is one exactly.
  static bool float_as_int64(double f, int64_t* out) noexcept {
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0) || f != std::floor(f)) return false;
    *out = static_cast<int64_t>(f);
    return true;
  }
  // An integral finite double as minimal two's complement little-endian bytes.
  static std::string float_bytes(double f) {
    int e = 0;
    const double m = std::frexp(std::fabs(f), &e);  // |f| = m * 2^e, m in [0.5, 1)
    uint64_t mant = static_cast<uint64_t>(std::ldexp(m, 53));
    int shift = e - 53;
    std::string out(static_cast<size_t>(e / 8 + 2), '\0');
    if (shift < 0) {  // (|f| < 2^53: only reached for values that fit, never called then)
      mant >>= -shift;
      shift = 0;
    }
    for (int bit = 0; bit < 64; ++bit) {
      if (mant >> bit & 1) out[static_cast<size_t>((bit + shift) / 8)] |= static_cast<char>(1 << ((bit + shift) % 8));
    }
    if (f < 0) negate_le(reinterpret_cast<uint8_t*>(&out[0]), out.size());
    return std::string(minimal_le(out));
  }
  bool numbers_equal(uint32_t a, uint32_t b) const {
    const Node& x = g_.nodes[a];
    const Node& y = g_.nodes[b];
    const bool xi = x.kind != ValueKind::floating && x.kind != ValueKind::big_integer;
    const bool yi = y.kind != ValueKind::floating && y.kind != ValueKind::big_integer;
    if (xi && yi) return x.i == y.i;
    if (x.kind == ValueKind::floating && y.kind == ValueKind::floating) return x.f == y.f;
    if (x.kind == ValueKind::big_integer && y.kind == ValueKind::big_integer) return minimal_le(g_.text(a)) == minimal_le(g_.text(b));
    if (x.kind == ValueKind::big_integer || y.kind == ValueKind::big_integer) {
      // A big int (beyond 64 bits, as the VM keeps them) equals only a float of its value.
      const uint32_t big = x.kind == ValueKind::big_integer ? a : b;
      const Node& other = x.kind == ValueKind::big_integer ? y : x;
      int64_t i = 0;
      if (other.kind != ValueKind::floating || !std::isfinite(other.f) || other.f != std::floor(other.f) ||
          float_as_int64(other.f, &i)) {
        return false;
      }
      return float_bytes(other.f) == minimal_le(g_.text(big));
    }
    const double f = x.kind == ValueKind::floating ? x.f : y.f;
    const int64_t i = x.kind == ValueKind::floating ? y.i : x.i;
    int64_t fi = 0;
    return float_as_int64(f, &fi) && fi == i;
  }
  // Every item of frozenset a is in frozenset b: b's items sorted by hash, each of a's
  // compared with those of its hash (n log n, as Python's set lookups are about linear).
  Result<bool> contains_all(uint32_t a, uint32_t b, size_t depth) {
    const Node& x = g_.nodes[a];
    const Node& y = g_.nodes[b];
    std::vector<std::pair<uint64_t, uint32_t>> in_b;
    in_b.reserve(y.ref);
    for (uint32_t k = 0; k < y.ref; ++k) {
      PTREAD_TRY(uint64_t h, hash(y.items[k], depth));
      in_b.emplace_back(h, y.items[k]);
    }
    std::sort(in_b.begin(), in_b.end());
    for (uint32_t j = 0; j < x.ref; ++j) {
      PTREAD_TRY(uint64_t h, hash(x.items[j], depth));
      bool found = false;
      for (auto it = std::lower_bound(in_b.begin(), in_b.end(), std::make_pair(h, uint32_t{0}));
           it != in_b.end() && it->first == h && !found; ++it) {
        PTREAD_TRY(found, equal(x.items[j], it->second, depth));
      }
      if (!found) return false;
    }
    return true;
  }
  // Tuples and frozensets can share items (memo gets), so comparing keys could take
  // exponential time (Python's would too; hashing is linear here, Python's is not): the
  // walks of one pickle's dicts have a budget, 2^22 steps and 256 a key.
  bool spend() noexcept { return budget_ == 0 ? false : (--budget_, true); }
  static Error too_deep() {
    return make_error(ErrorCode::limit_exceeded, "a dict key nests tuples deeper than Limits::max_nesting_depth (or 4096)");
  }
  static Error over_budget() {
    return make_error(ErrorCode::limit_exceeded, "hashing and comparing the keys of a pickle's dicts took over 2^22 + 256 steps a key (tuple keys sharing items)");
  }

  const Graph& g_;
  BlockPool& pool_;
  size_t max_depth_;
  size_t budget_ = size_t{1} << 22;  // dedup() adds 256 a key
  std::unordered_map<uint32_t, uint64_t> hashes_;  // tuple or frozenset node: its hash (hash())
  bool keyed_ = false;  // a flood was seen: hashes under keyed_hash
  std::vector<uint32_t> first_, place_;  // only for a dict with a repeated key
};

}  // namespace detail
}  // namespace ptread
