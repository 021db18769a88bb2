// ptread — the value graph the pickle VM builds: nodes for None, bools, ints (any size),
// floats, str, bytes, containers, globals, generic objects, tensors; arena-allocated,
// 16-byte nodes, referenced by index. Also the big-integer and UTF-8 helpers the VM uses.
#pragma once


#include "../memory/arena.hpp"
#include "../text/text.hpp"
#include "../error.hpp"
#include "../limits.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ptread {

enum class ValueKind : uint8_t {
  none, boolean, integer, big_integer, floating, string, bytes,
  list, tuple, dict, set, frozenset,
  global,       // a class or function named by GLOBAL: module and name
  object,       // an instance of a class ptread does not interpret: class, args, state
  tensor,       // a tensor (index into the checkpoint's tensor table)
  unsupported,  // a tensor-like entry ptread cannot read (nested, meta ...), with a reason
  quantized,    // a quantized tensor (index into the checkpoint's quantized table)
  sparse,       // a sparse tensor (index into the checkpoint's sparse table)
  storage,      // a storage saved on its own (Value::as_storage); inside the reader, a persistent id
  missing,      // the result of looking up something absent
};

inline const char* value_kind_name(ValueKind k) noexcept {
  switch (k) {
    case ValueKind::none: return "None";
    case ValueKind::boolean: return "bool";
    case ValueKind::integer: return "int";
    case ValueKind::big_integer: return "int";
    case ValueKind::floating: return "float";
    case ValueKind::string: return "str";
    case ValueKind::bytes: return "bytes";
    case ValueKind::list: return "list";
    case ValueKind::tuple: return "tuple";
    case ValueKind::dict: return "dict";
    case ValueKind::set: return "set";
    case ValueKind::frozenset: return "frozenset";
    case ValueKind::global: return "global";
    case ValueKind::object: return "object";
    case ValueKind::tensor: return "tensor";
    case ValueKind::unsupported: return "unsupported";
    case ValueKind::quantized: return "quantized tensor";
    case ValueKind::sparse: return "sparse tensor";
    case ValueKind::storage: return "storage";
    case ValueKind::missing: return "missing";
  }
  return "?";
}

namespace detail {

inline constexpr uint32_t kNoNode = 0xffffffffu;
inline constexpr uint32_t kNoneNode = 0, kTrueNode = 1, kFalseNode = 2;

// Object nodes keep these in items[]; kNoNode when absent.
enum ObjectSlot : uint32_t { kObjClass = 0, kObjArgs = 1, kObjState = 2, kObjListItems = 3, kObjDictItems = 4 };

// The items of a container or object node (list/tuple/set: values; dict: key, value,
// ...; object: slots), as Graph::at() shows them: a view into the graph's arena.
struct Items {
  uint32_t* ptr = nullptr;
  uint32_t n = 0;

  size_t size() const noexcept { return n; }
  bool empty() const noexcept { return n == 0; }
  uint32_t& operator[](size_t k) noexcept { return ptr[k]; }
  const uint32_t& operator[](size_t k) const noexcept { return ptr[k]; }
  const uint32_t* data() const noexcept { return ptr; }
  const uint32_t* begin() const noexcept { return ptr; }
  const uint32_t* end() const noexcept { return ptr + n; }
};

inline bool has_items(ValueKind k) noexcept {
  return k == ValueKind::list || k == ValueKind::tuple || k == ValueKind::dict || k == ValueKind::set ||
         k == ValueKind::frozenset || k == ValueKind::object;
}

// A node as stored: 16 bytes. Graph::at() gives a NodeView of it.
struct Node {
  ValueKind kind = ValueKind::none;
  uint8_t tag = 0;   // global: the hooks' classification, cached (0: not classified yet;
                     // torch's: TorchContext::global_tag);
                     // tuple, frozenset: kHashableTag once the VM found it hashable;
                     // dict: kMergedTag, made by merging two BUILD states (torch/build.hpp),
                     // or kAttrsTag, one that takes attributes
  uint8_t tag2 = 0;  // global: second and third caches for the hooks
  uint8_t tag3 = 0;
  uint32_t ref = 0;  // text: its length (kLongText: see text); containers, objects: item
                     // count; tensor/storage/unsupported: table index; global: 0 or
                     // kGlobalNamesAsIs
  union {
    int64_t i = 0;                    // integer, boolean
    double f;                         // floating
    const char* text;                 // string, bytes, big_integer (kLongText: a std::string_view*)
    uint32_t* items;                  // containers, objects
    const std::string_view* names;    // global: module, name
  };
};
inline constexpr uint32_t kLongText = 0xffffffffu;
// Node::tag of a tuple or frozenset whose items the pickle VM found hashable, all the way
// down (its items never change, so it is not walked again).
inline constexpr uint8_t kHashableTag = 1;
// Node::tag of a dict torch/build.hpp made to merge an object's states: the object's own, not
// reachable otherwise, so later merges append to it.
inline constexpr uint8_t kMergedTag = 2;
// Node::tag of a dict whose instances take attributes, as Python's default BUILD sets them
// (an OrderedDict or Counter: they have a __dict__; a dict or defaultdict has none).
inline constexpr uint8_t kAttrsTag = 3;
// Node::ref of a global read after a PROTO of 3 or more: Python 3's find_class() takes its
// names as they are (below 3 it maps Python 2 modules, __builtin__ and copy_reg, to theirs).
inline constexpr uint32_t kGlobalNamesAsIs = 1;

// What Graph::at() returns: a node's fields, its items as a view.
struct NodeView {
  ValueKind kind = ValueKind::none;
  uint32_t ref = 0;  // tensor/storage/unsupported: table index
  union {
    int64_t i = 0;   // integer, boolean
    double f;        // floating
  };
  Items items;       // containers and objects; empty otherwise
};

// Nodes, items and texts never move while the graph grows, so pointers into them stay
// valid. Texts are copied into the graph's arena: the graph does not refer to the pickle.
struct Graph {
  SegmentedVector<Node> nodes;
  Arena arena;
  std::vector<uint32_t> hashed;  // the dict, set and frozenset nodes, in the order made (DictKeys)
  uintptr_t borrow_begin_ = 0, borrow_end_ = 0;  // borrow_bytes(); 0: none

  // pool: where its blocks come from (it must outlive the graph), or nullptr.
  explicit Graph(BlockPool* pool = nullptr) : nodes(pool), arena(pool) {
    for (uint32_t& s : small_ints_) s = kNoNode;
    Node n;
    nodes.push_back(n);  // kNoneNode
    n.kind = ValueKind::boolean;
    n.i = 1;
    nodes.push_back(n);  // kTrueNode
    n.i = 0;
    nodes.push_back(n);  // kFalseNode
  }
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  PTREAD_ALWAYS_INLINE uint32_t add(const Node& n) {
    nodes.push_back(n);
    return static_cast<uint32_t>(nodes.size() - 1);
  }
  // A new node, written in place (no temporary Node to copy).
  PTREAD_ALWAYS_INLINE uint32_t emit(ValueKind kind, uint32_t ref) {
    Node* n = nodes.grow();
    n->kind = kind;
    n->tag = n->tag2 = n->tag3 = 0;
    n->ref = ref;
    return static_cast<uint32_t>(nodes.size() - 1);
  }
  PTREAD_ALWAYS_INLINE uint32_t emit_int(ValueKind kind, uint32_t ref, int64_t i) {
    Node* n = nodes.grow();
    n->kind = kind;
    n->tag = n->tag2 = n->tag3 = 0;
    n->ref = ref;
    n->i = i;
    return static_cast<uint32_t>(nodes.size() - 1);
  }
  PTREAD_ALWAYS_INLINE uint32_t emit_items(ValueKind kind, uint32_t count, uint32_t* items) {
    Node* n = nodes.grow();
    n->kind = kind;
    n->tag = n->tag2 = n->tag3 = 0;
    n->ref = count;
    n->items = items;
    return static_cast<uint32_t>(nodes.size() - 1);
  }
  PTREAD_ALWAYS_INLINE uint32_t emit_text(ValueKind kind, uint32_t ref, const char* text) {
    Node* n = nodes.grow();
    n->kind = kind;
    n->tag = n->tag2 = n->tag3 = 0;
    n->ref = ref;
    n->text = text;
    return static_cast<uint32_t>(nodes.size() - 1);
  }
  // Small ints are one node each, as they are one object each in Python.
  PTREAD_ALWAYS_INLINE uint32_t add_int(int64_t v) {
    const bool small = v >= 0 && v < 256;
    if (small && small_ints_[v] != kNoNode) return small_ints_[v];
    const uint32_t id = emit_int(ValueKind::integer, 0, v);
    if (small) small_ints_[v] = id;
    return id;
  }
  uint32_t add_float(double v) {
    Node n;
    n.kind = ValueKind::floating;
    n.f = v;
    return add(n);
  }
  // A copy of s kept by the graph.
  PTREAD_ALWAYS_INLINE std::string_view intern(std::string_view s) {
    return std::string_view(arena.copy(s.data(), s.size()), s.size());
  }
  // A text node; copies s (but bytes the graph borrows: borrow_bytes).
  PTREAD_ALWAYS_INLINE uint32_t add_text(ValueKind kind, std::string_view s) {
    if (PTREAD_UNLIKELY(borrow_end_ != 0) && kind == ValueKind::bytes && borrowed(s) && s.size() >= kBorrowMin) {
      return add_interned_text(kind, s);
    }
    return add_interned_text(kind, intern(s));
  }
  // Bytes of kBorrowMin or more that lie in [begin, end) become views, not copies: a bare
  // pickle's nested archives (torch.storage._load_from_bytes) are read where the mapped file
  // holds them. The caller keeps that memory alive as long as the graph.
  static constexpr size_t kBorrowMin = 4096;
  void borrow_bytes(const char* begin, const char* end) noexcept {
    borrow_begin_ = reinterpret_cast<uintptr_t>(begin);
    borrow_end_ = reinterpret_cast<uintptr_t>(end);
  }
  bool borrowed(std::string_view s) const noexcept {
    const auto p = reinterpret_cast<uintptr_t>(s.data());
    return borrow_end_ != 0 && p >= borrow_begin_ && s.size() <= borrow_end_ - p && p <= borrow_end_;
  }
  // A text node for a text the graph already holds (a view returned by text() or intern()).
  PTREAD_ALWAYS_INLINE uint32_t add_interned_text(ValueKind kind, std::string_view s) {
    if (PTREAD_LIKELY(s.size() < kLongText)) return emit_text(kind, static_cast<uint32_t>(s.size()), s.data());
    auto* v = static_cast<std::string_view*>(arena.allocate(sizeof(std::string_view), alignof(std::string_view)));
    ::new (static_cast<void*>(v)) std::string_view(s);
    return emit_text(kind, kLongText, reinterpret_cast<const char*>(v));
  }
  uint32_t add_container(ValueKind kind) { return add_container(kind, nullptr, 0); }
  PTREAD_ALWAYS_INLINE uint32_t add_container(ValueKind kind, const uint32_t* items, size_t count) {
    if (kind == ValueKind::tuple && count == 0) return empty_tuple();  // () is one object, as in Python
    const uint32_t id = emit_items(kind, static_cast<uint32_t>(count), new_items(items, count, capacity(kind, count)));
    if (kind == ValueKind::dict || kind == ValueKind::set || kind == ValueKind::frozenset) hashed.push_back(id);
    return id;
  }
  // A node for each global of another graph, in no container: what audit() counts of a model
  // made of others (a sharded set's shards, the archives a bare pickle nests).
  void add_globals_of(const Graph& other) {
    for (size_t k = 0; k < other.nodes.size(); ++k) {
      if (other.nodes[k].kind == ValueKind::global) {
        add_global(other.global_module(static_cast<uint32_t>(k)), other.global_name(static_cast<uint32_t>(k)));
      }
    }
  }
  uint32_t add_global(std::string_view module, std::string_view name) {
    return add_interned_global(intern(module), intern(name));
  }
  uint32_t add_interned_global(std::string_view module, std::string_view name) {
    auto* v = static_cast<std::string_view*>(arena.allocate(2 * sizeof(std::string_view), alignof(std::string_view)));
    ::new (static_cast<void*>(v)) std::string_view(module);
    ::new (static_cast<void*>(v + 1)) std::string_view(name);
    Node n;
    n.kind = ValueKind::global;
    n.names = v;
    return add(n);
  }
  uint32_t add_object(uint32_t cls, uint32_t args) {
    const uint32_t slots[5] = {cls, args, kNoNode, kNoNode, kNoNode};
    return emit_items(ValueKind::object, 5, new_items(slots, 5, 5));
  }
  // Appends to a list, dict or set node.
  void append(uint32_t node, const uint32_t* items, size_t count) {
    Node& n = nodes[node];
    const size_t have = n.ref, want = have + count;
    if (want > capacity(n.kind, have)) n.items = new_items(n.items, have, capacity(n.kind, want));
    if (count) std::memcpy(n.items + have, items, count * sizeof(uint32_t));
    n.ref = static_cast<uint32_t>(want);
  }
  // Makes a node a leaf (tensor, unsupported ...) in place.
  void set_leaf(uint32_t node, ValueKind kind, uint32_t ref) {
    Node& n = nodes[node];
    n.kind = kind;
    n.ref = ref;
    n.i = 0;
  }

  PTREAD_ALWAYS_INLINE NodeView at(uint32_t i) const {
    const Node& n = nodes[i];
    NodeView v;
    v.kind = n.kind;
    if (has_items(n.kind)) {
      v.items.ptr = n.items;
      v.items.n = n.ref;
    } else {
      v.ref = n.ref;
      v.i = n.i;  // or f: the same bits
    }
    return v;
  }
  PTREAD_ALWAYS_INLINE ValueKind kind(uint32_t i) const { return nodes[i].kind; }
  // The text of a string, bytes or big_integer node.
  PTREAD_ALWAYS_INLINE std::string_view text(uint32_t i) const {
    const Node& n = nodes[i];
    if (PTREAD_LIKELY(n.ref != kLongText)) return std::string_view(n.text, n.ref);
    return *reinterpret_cast<const std::string_view*>(n.text);
  }
  std::string_view global_module(uint32_t i) const { return nodes[i].names[0]; }
  std::string_view global_name(uint32_t i) const { return nodes[i].names[1]; }
  bool is_global(uint32_t i, std::string_view module, std::string_view name) const {
    return nodes[i].kind == ValueKind::global && global_module(i) == module && global_name(i) == name;
  }
  bool is_string(uint32_t i, std::string_view s) const {
    return nodes[i].kind == ValueKind::string && text(i) == s;
  }
  // The number of items of a container or object node.
  size_t count(uint32_t i) const { return has_items(nodes[i].kind) ? nodes[i].ref : 0; }
  // For dicts: the value under a string key, or kNoNode. The last one: a dict the VM is
  // still making may hold a key twice, and Python's d[k] = v keeps the last value.
  uint32_t dict_get(uint32_t d, std::string_view key) const {
    const Items it = at(d).items;
    for (size_t k = it.size() & ~size_t{1}; k >= 2; k -= 2) {
      if (is_string(it[k - 2], key)) return it[k - 1];
    }
    return kNoNode;
  }

 private:
  // The items block of a node holding `count` items: lists, dicts and sets grow (powers of
  // two from 4), the others never do.
  static size_t capacity(ValueKind kind, size_t count) {
    if (count == 0) return 0;
    if (kind != ValueKind::list && kind != ValueKind::dict && kind != ValueKind::set) return count;
    size_t c = 4;
    while (c < count) c *= 2;
    return c;
  }
  PTREAD_ALWAYS_INLINE uint32_t* new_items(const uint32_t* items, size_t count, size_t cap) {
    if (cap == 0) return nullptr;
    uint32_t* b = static_cast<uint32_t*>(arena.allocate(cap * sizeof(uint32_t), alignof(uint32_t)));
    if (count) copy_bytes(b, items, count * sizeof(uint32_t));
    return b;
  }
  uint32_t empty_tuple() {
    if (empty_tuple_ == kNoNode) {
      Node n;
      n.kind = ValueKind::tuple;
      empty_tuple_ = add(n);
    }
    return empty_tuple_;
  }

  uint32_t small_ints_[256];
  uint32_t empty_tuple_ = kNoNode;
};

// An object's BUILD state as Python's default __reduce_ex__ makes it: its __dict__, or for a
// class with __slots__ the pair (__dict__ or None, {slot: value} or None), which BUILD sets
// as attributes both. *attrs: the dict state (kNoNode: none); *slots: the slot dict
// (kNoNode: none). Any other state is *attrs as it is.
inline void object_state(const Graph& g, uint32_t state, uint32_t* attrs, uint32_t* slots) {
  *attrs = state;
  *slots = kNoNode;
  if (state == kNoNode || g.kind(state) != ValueKind::tuple || g.count(state) != 2) return;
  const uint32_t d = g.at(state).items[0], s = g.at(state).items[1];
  const bool d_dict = g.kind(d) == ValueKind::dict, s_dict = g.kind(s) == ValueKind::dict;
  if (d_dict) {
    *attrs = d;
    if (s_dict) *slots = s;
  } else if (g.kind(d) == ValueKind::none && s_dict) {
    *attrs = kNoNode;
    *slots = s;
  }
}

// ---- little-endian integers, as the pickle stores them ----

// The 4 bytes at p as a little-endian uint32 (BININT, LONG_BINGET, LONG_BINPUT ...).
inline uint32_t load_u32(const uint8_t* p) noexcept {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// ---- big integers (two's complement, little-endian bytes, as LONG1/LONG4 store them) ----

inline bool fits_int64(const uint8_t* p, size_t n, int64_t* out) {
  if (n == 0) {
    *out = 0;
    return true;
  }
  const bool neg = (p[n - 1] & 0x80) != 0;
  for (size_t k = 8; k < n; ++k) {
    if (p[k] != (neg ? 0xff : 0x00)) return false;
  }
  if (n > 8 && ((p[7] & 0x80) != 0) != neg) return false;
  uint64_t v = neg ? ~uint64_t{0} : 0;
  for (size_t k = 0; k < n && k < 8; ++k) {
    v &= ~(uint64_t{0xff} << (8 * k));
    v |= static_cast<uint64_t>(p[k]) << (8 * k);
  }
  std::memcpy(out, &v, sizeof v);
  return true;
}

// Decimal text of a two's complement little-endian integer.
// Python refuses to convert ints of more digits between text and int
// (sys.get_int_max_str_digits()): torch.load fails on such literals, and str() of such a
// key fails, so no tensor name can contain one.
inline constexpr size_t kMaxIntDigits = 4300;

// Whether the little-endian two's complement integer `le` has over kMaxIntDigits digits.
inline bool big_too_long(std::string_view le);

// le without redundant sign bytes (LONG1 may carry them).
inline std::string_view minimal_le(std::string_view le) noexcept {
  while (le.size() > 1 && ((le.back() == '\0' && !(le[le.size() - 2] & 0x80)) ||
                           (le.back() == '\xff' && (le[le.size() - 2] & 0x80)))) {
    le.remove_suffix(1);
  }
  return le;
}

// Two's complement negation of the little-endian integer in [p, p + n), in place.
inline void negate_le(uint8_t* p, size_t n) noexcept {
  unsigned carry = 1;
  for (size_t k = 0; k < n; ++k) {
    const unsigned v = static_cast<unsigned>(static_cast<uint8_t>(~p[k])) + carry;
    p[k] = static_cast<uint8_t>(v);
    carry = v >> 8;
  }
}

inline std::string big_to_decimal(std::string_view le) {
  le = minimal_le(le);
  if (le.size() > 1787) return "<int of " + std::to_string(le.size()) + " bytes>";  // over 4300 digits
  std::vector<uint8_t> mag(le.begin(), le.end());
  const bool neg = !mag.empty() && (mag.back() & 0x80);
  if (neg) negate_le(mag.data(), mag.size());  // the magnitude
  std::string digits;
  bool nonzero = true;
  while (nonzero) {
    unsigned rem = 0;
    nonzero = false;
    for (size_t k = mag.size(); k-- > 0;) {
      unsigned cur = (rem << 8) | mag[k];
      mag[k] = static_cast<uint8_t>(cur / 10);
      rem = cur % 10;
      if (mag[k]) nonzero = true;
    }
    digits.push_back(static_cast<char>('0' + rem));
  }
  if (digits.size() > kMaxIntDigits) return "<int of " + std::to_string(le.size()) + " bytes>";
  if (neg) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

// The decimal digits of the little-endian two's complement integer `le`, of any size, as
// Python prints it without the limit of 3.11 (3.10 and before, and
// sys.set_int_max_str_digits(0)); false, *out untouched, when they would be over max_digits
// (checked before converting, which is quadratic in the digits: 32-bit limbs divided by 10^9).
inline bool big_to_decimal_within(std::string_view le, size_t max_digits, std::string* out) {
  le = minimal_le(le);
  if ((le.size() - 1) * 12 / 5 > max_digits) return false;  // (a full byte is over 2.4 digits)
  std::vector<uint8_t> mag(le.begin(), le.end());
  const bool neg = !mag.empty() && (mag.back() & 0x80);
  if (neg) negate_le(mag.data(), mag.size());
  std::vector<uint32_t> limbs((mag.size() + 3) / 4, 0);
  for (size_t k = 0; k < mag.size(); ++k) limbs[k / 4] |= static_cast<uint32_t>(mag[k]) << (8 * (k % 4));
  while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
  std::vector<uint32_t> groups;  // base 10^9, least significant first
  while (!limbs.empty()) {
    uint64_t rem = 0;
    for (size_t k = limbs.size(); k-- > 0;) {
      const uint64_t cur = (rem << 32) | limbs[k];
      limbs[k] = static_cast<uint32_t>(cur / 1000000000u);
      rem = cur % 1000000000u;
    }
    groups.push_back(static_cast<uint32_t>(rem));
    while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
  }
  std::string digits = neg ? "-" : "";
  digits += std::to_string(groups.empty() ? 0u : groups.back());
  for (size_t k = groups.size() > 1 ? groups.size() - 1 : 0; k-- > 0;) {
    const std::string g = std::to_string(groups[k]);
    digits.append(9 - g.size(), '0');
    digits += g;
  }
  if (digits.size() - (neg ? 1 : 0) > max_digits) return false;
  *out = std::move(digits);
  return true;
}

inline bool big_too_long(std::string_view le) {
  return minimal_le(le).size() >= 1786 && big_to_decimal(le).front() == '<';  // (1785 bytes: under 4300 digits)
}

// Whether [p, p + n) decodes as Python's str(b, 'utf-8', 'surrogatepass') decodes pickled
// text: well-formed UTF-8, where encoded surrogates (U+D800..U+DFFF) are allowed.
inline bool valid_pickle_utf8(const uint8_t* p, size_t n) {
  return utf8_valid(std::string_view(reinterpret_cast<const char*>(p), n), /*allow_surrogates=*/true);
}


}  // namespace detail
}  // namespace ptread
