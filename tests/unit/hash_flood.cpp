// Hash flooding: tables indexed by what a file chose (zip record names, storage keys, tensor
// names, dict keys, far memo keys) against keys crafted to fall into one run of slots.
//
// hash_string and DictKeys' int hash have a fixed key, and both can be run backwards: the
// helpers below make thousands of valid keys that share one hash (strings) or the low bits
// of one (ints). Each file read them all in a walk along one run of slots (quadratic: 20,000
// crafted storage keys took 2.7 s to open, 20,000 crafted dict keys were E502). The tables
// now bound how far a key lies from its home slot and index under a keyed hash past that
// bound (include/ptread/memory/keyed_hash.hpp). No timing here: the tests check the bound
// itself (every key within StringIndex::kMaxDistance, the keyed mode taken), and that what
// the file holds reads as it does without a flood.
#include <catch2/catch.hpp>

#include "support/torch_pickles.hpp"
#include "support/zip_writer.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

using namespace ptread_test;
using ptread::detail::StringIndex;

namespace {

// hash_string, one 8-byte step: h = g(h ^ word); g is a bijection.
uint64_t flood_string_step(uint64_t x) {
  x *= 0x9e3779b97f4a7c15ull;
  return x ^ (x >> 29);
}

// n strings prefix + 8 counter bytes + 8 computed bytes (prefix: a multiple of 8 bytes) that
// share one hash_string: the last step's input is made the same for all. Every byte is below
// 0x80, so each is valid UTF-8 (a pickle's text).
std::vector<std::string> flood_strings(const std::string& prefix, size_t n) {
  const uint64_t m = 0x9e3779b97f4a7c15ull;
  uint64_t h = 0x243f6a8885a308d3ull ^ (static_cast<uint64_t>(prefix.size() + 16) * m);
  for (size_t i = 0; i + 8 <= prefix.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, prefix.data() + i, 8);
    h = flood_string_step(h ^ w);
  }
  std::vector<std::string> out;
  for (uint64_t c = 0; out.size() < n; ++c) {
    const uint64_t w1 = c & 0x7f7f7f7f7f7f7f7full;
    if (w1 != c) continue;
    const uint64_t w2 = flood_string_step(h ^ w1) ^ 0x0123456789abcdefull;  // the last step's input: 0x0123...
    if (w2 & 0x8080808080808080ull) continue;
    std::string k = prefix;
    for (int b = 0; b < 8; ++b) k += static_cast<char>(w1 >> (8 * b));
    for (int b = 0; b < 8; ++b) k += static_cast<char>(w2 >> (8 * b));
    out.push_back(k);
  }
  return out;
}

uint64_t flood_inverse_odd(uint64_t a) {  // a odd
  uint64_t x = a;
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
// fmix64 backwards (x ^= x >> 33 is its own inverse).
uint64_t flood_unfmix64(uint64_t h) {
  h ^= h >> 33;
  h *= flood_inverse_odd(0xc4ceb9fe1a85ec53ull);
  h ^= h >> 33;
  h *= flood_inverse_odd(0xff51afd7ed558ccdull);
  return h ^ (h >> 33);
}

// n ints whose DictKeys hashes (fmix64) have distinct low 32 bits, all with the low 16
// bits below 16: one run of slots in any table of up to 2^16 slots.
std::vector<int64_t> flood_ints(size_t n) {
  std::vector<int64_t> out;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t h = (i & 15) | ((i >> 4) & 0xffff) << 16 | i << 40;
    out.push_back(static_cast<int64_t>(flood_unfmix64(h)));
  }
  return out;
}

Bytes flood_zip(const Bytes& pkl, const std::vector<std::pair<std::string, Bytes>>& records) {
  ZipWriter w;
  w.add("archive/data.pkl", pkl);
  for (const auto& r : records) w.add(r.first, r.second);
  w.add("archive/version", to_bytes("3\n"));
  return w.build().flat();
}

// The items of a dict of tensors as torch.save writes them (after its MARK): names[i], then
// the tensor spec(i) (the first tensor names the globals, later ones get them from the memo).
template <class Spec>
void flood_tensor_items(Pickle& p, Memo& m, const std::vector<std::string>& names, const Spec& spec) {
  RunKeys first{};
  for (size_t i = 0; i < names.size(); ++i) {
    p.str(names[i]);
    m.put(p);
    const RunKeys k = tensor(p, m, spec(i), i ? &first : nullptr);
    if (i == 0) first = k;
  }
}

// Protocol 2, an empty dict (memoized), MARK: where flood_tensor_items() go.
void flood_dict_start(Pickle& p, Memo& m) {
  p.op(0x80).op(2).op('}');
  m.put(p);
  p.op('(');
}

// A pickle run as read_zip_checkpoint runs data.pkl (storages from test_storages()).
struct FloodRun {
  ptread::detail::Model model;
  ptread::Limits limits;
  ptread::Result<uint32_t> root = ptread::make_error(ptread::ErrorCode::ok, "not run");
};
std::unique_ptr<FloodRun> flood_run(const Bytes& p) {
  auto r = std::make_unique<FloodRun>();
  ptread::detail::TorchHooks hooks(r->model, test_storages(), r->limits);
  ptread::detail::PickleVM vm(r->model.graph, hooks, r->limits, "test.pkl");
  r->root = vm.run(p.data(), p.size());
  return r;
}

// Runs DictKeys again over dict node d of r (no key repeats by now): did it take the keyed hash?
bool flood_dict_keys_keyed(FloodRun& r, uint32_t d) {
  ptread::detail::BlockPool pool;
  ptread::detail::DictKeys keys(r.model.graph, pool, r.limits.max_nesting_depth);
  const auto st = keys.dedup(r.model.graph, d);
  REQUIRE(st.ok());
  return keys.keyed();
}

}  // namespace

TEST_CASE("keyed hash: SipHash-2-4 gives the reference test vectors; the process key is drawn", "[hash]") {
  // The SipHash paper's key 00 01 .. 0f: the empty message, and 00 01 .. 0e (its Appendix A).
  const ptread::detail::SipKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  uint8_t msg[15];
  for (uint8_t i = 0; i < 15; ++i) msg[i] = i;
  CHECK(ptread::detail::siphash<2, 4>(msg, 0, key) == 0x726fdb47dd0e0e31ull);
  CHECK(ptread::detail::siphash<2, 4>(msg, 15, key) == 0xa129ca6149be45e5ull);
  const auto& k = ptread::detail::process_sip_key();
  CHECK((k.k0 != 0 || k.k1 != 0));
  CHECK(&k == &ptread::detail::process_sip_key());  // one key a process
  CHECK(ptread::detail::keyed_hash(std::string_view("a")) != ptread::detail::keyed_hash(std::string_view("b")));
}

TEST_CASE("StringIndex: keys crafted to share one hash are indexed under the keyed hash, each within kMaxDistance", "[hash]") {
  const auto keys = flood_strings("", 20000);
  for (const auto& k : keys) REQUIRE(ptread::detail::hash_string(k) == ptread::detail::hash_string(keys[0]));
  std::vector<std::string> listed = keys;
  listed.push_back(keys[7]);  // a name listed twice: the first wins
  auto key_at = [&](uint32_t i) { return std::string_view(listed[i]); };
  const std::string absent = flood_strings("", 20001).back();  // shares the hash, never inserted
  SECTION("all at once (zip records, tensor names)") {
    StringIndex index;
    index.insert_all(static_cast<uint32_t>(listed.size()), key_at);
    CHECK(index.keyed());
    CHECK(index.size() == keys.size());
    CHECK(index.max_distance() <= StringIndex::kMaxDistance);
    for (uint32_t i = 0; i < keys.size(); ++i) REQUIRE(index.find(keys[i], key_at) == i);
    CHECK(index.find(absent, key_at) == StringIndex::npos);
  }
  SECTION("one by one (storage keys)") {
    StringIndex index;
    for (uint32_t i = 0; i < listed.size(); ++i) {
      INFO("key " << i);
      REQUIRE(index.insert(listed[i], i, key_at) == (i < keys.size() ? i : 7u));
    }
    CHECK(index.keyed());
    CHECK(index.max_distance() <= StringIndex::kMaxDistance);
    for (uint32_t i = 0; i < keys.size(); ++i) REQUIRE(index.find(keys[i], key_at) == i);
    CHECK(index.find(absent, key_at) == StringIndex::npos);
  }
  SECTION("past the bound under the keyed hash too (a bound of 1 here): no bound, every key found") {
    for (size_t limit : {size_t{0}, size_t{1}}) {
      StringIndex index(limit);
      index.insert_all(static_cast<uint32_t>(listed.size()), key_at);
      CHECK(index.keyed());
      CHECK(index.max_distance() > limit);
      for (uint32_t i = 0; i < keys.size(); ++i) REQUIRE(index.find(keys[i], key_at) == i);
      CHECK(index.find(absent, key_at) == StringIndex::npos);
      StringIndex one_by_one(limit);
      for (uint32_t i = 0; i < listed.size(); ++i) REQUIRE(one_by_one.insert(listed[i], i, key_at) == (i < keys.size() ? i : 7u));
      for (uint32_t i = 0; i < keys.size(); ++i) REQUIRE(one_by_one.find(keys[i], key_at) == i);
    }
  }
  SECTION("the names of real files stay on the fast hash") {
    std::vector<std::string> names;
    for (int i = 0; i < 100000; ++i) names.push_back("archive/data/" + std::to_string(i));
    for (int i = 0; i < 100000; ++i) names.push_back("layers." + std::to_string(i) + ".weight");
    auto name_at = [&](uint32_t i) { return std::string_view(names[i]); };
    StringIndex index;
    index.insert_all(static_cast<uint32_t>(names.size()), name_at);
    CHECK_FALSE(index.keyed());
    CHECK(index.max_distance() <= StringIndex::kMaxDistance);
    for (uint32_t i = 0; i < names.size(); i += 97) REQUIRE(index.find(names[i], name_at) == i);
  }
}

TEST_CASE("checkpoint: storage keys, record names and tensor names crafted to collide read as without a flood", "[hash]") {
  const size_t n = 5000;
  SECTION("storage keys: each tensor reads its own record") {
    const auto keys = flood_strings("", n);
    Pickle p;
    Memo m;
    flood_dict_start(p, m);
    std::vector<std::string> names;
    std::vector<std::pair<std::string, Bytes>> records;
    for (size_t i = 0; i < n; ++i) {
      names.push_back("t" + std::to_string(i));
      Bytes rec(24);
      const float v[6] = {float(i), 1, 2, 3, 4, 5};
      std::memcpy(rec.data(), v, sizeof v);
      records.push_back({"archive/data/" + keys[i], rec});
    }
    flood_tensor_items(p, m, names, [&](size_t i) {
      TensorSpecIn t;
      t.key = keys[i];
      return t;
    });
    p.op('u').op('.');
    const Bytes file = flood_zip(p.b, records);
    auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
    REQUIRE(ck.ok());
    REQUIRE(ck->tensors().size() == n);
    for (size_t i = 0; i < n; i += 7) {
      const ptread::Tensor* t = ck->find("t" + std::to_string(i));
      REQUIRE(t != nullptr);
      CHECK(static_cast<const float*>(t->data_ptr())[0] == float(i));
    }
  }
  SECTION("record names: the one tensor finds its record among them") {
    const auto names = flood_strings("archive/floodfld", n);
    Pickle p;
    Memo m;
    flood_dict_start(p, m);
    flood_tensor_items(p, m, {"t"}, [](size_t) {
      TensorSpecIn t;
      t.key = "k";  // not a number: looked up by record name
      return t;
    });
    p.op('u').op('.');
    std::vector<std::pair<std::string, Bytes>> records;
    for (const auto& s : names) records.push_back({s, Bytes(1, 0x55)});
    Bytes rec(24, 0);
    rec[0] = 0x7f;
    records.push_back({"archive/data/k", rec});
    const Bytes file = flood_zip(p.b, records);
    auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
    REQUIRE(ck.ok());
    REQUIRE(ck->find("t") != nullptr);
    CHECK(static_cast<const uint8_t*>(ck->find("t")->data_ptr())[0] == 0x7f);
  }
  SECTION("tensor names: {'pppppp': {k: tensor}} with every 'pppppp.' + k sharing a hash") {
    const auto full = flood_strings("pppppp.x", n);
    Pickle p;
    Memo m;
    p.op(0x80).op(2).op('}');
    m.put(p);
    p.str("pppppp");
    m.put(p);
    p.op('}');
    m.put(p);
    p.op('(');
    std::vector<std::string> inner;
    for (const auto& f : full) inner.push_back(f.substr(7));
    flood_tensor_items(p, m, inner, [](size_t i) {
      TensorSpecIn t;
      t.offset = static_cast<int64_t>(i % 6);
      t.size = {};
      t.stride = {};
      return t;
    });
    p.op('u').op('s').op('.');
    Bytes rec(24);
    const float v[6] = {10, 11, 12, 13, 14, 15};
    std::memcpy(rec.data(), v, sizeof v);
    const Bytes file = flood_zip(p.b, {{"archive/data/0", rec}});
    auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
    REQUIRE(ck.ok());
    REQUIRE(ck->tensors().size() == n);
    for (size_t i = 0; i < n; i += 7) {
      INFO("tensor " << i);
      CHECK(ck->tensors()[i].name == full[i]);
      const ptread::Tensor* t = ck->find(full[i]);
      REQUIRE(t != nullptr);
      CHECK(static_cast<const float*>(t->data_ptr())[0] == float(10 + i % 6));
    }
    CHECK(ck->find(flood_strings("pppppp.x", n + 1).back()) == nullptr);
  }
}

TEST_CASE("DictKeys: string and int keys crafted to collide keep Python's dict semantics under the keyed hash", "[hash]") {
  SECTION("20,000 strings sharing one hash, one of them set again (it was E502: over the comparison budget)") {
    const auto keys = flood_strings("", 20000);
    Pickle p;
    p.op(0x80).op(2).op('}').op('(');
    for (size_t i = 0; i < keys.size(); ++i) p.str(keys[i]).integer(static_cast<int64_t>(i));
    p.str(keys[5]).integer(-1);  // d[keys[5]] = -1: its first place, the last value
    p.op('u').op('.');
    auto r = flood_run(p.b);
    REQUIRE(r->root.ok());
    const auto& g = r->model.graph;
    const auto items = g.at(*r->root).items;
    REQUIRE(items.size() == 2 * keys.size());
    for (size_t i = 0; i < keys.size(); i += 101) CHECK(g.text(items[2 * i]) == keys[i]);
    CHECK(g.text(items[10]) == keys[5]);
    CHECK(g.at(items[11]).i == -1);
    CHECK(g.at(items[13]).i == 6);
    CHECK(flood_dict_keys_keyed(*r, *r->root));
  }
  SECTION("20,000 ints in one run of slots; 1.0 and True repeat 1") {
    const auto ints = flood_ints(20000);
    Pickle p;
    p.op(0x80).op(2).op('}').op('(');
    for (size_t i = 0; i < ints.size(); ++i) p.integer(ints[i]).op('N');
    p.integer(1).integer(1);
    const uint8_t one[] = {'G', 0x3f, 0xf0, 0, 0, 0, 0, 0, 0};  // BINFLOAT 1.0, big-endian
    for (uint8_t b : one) p.op(b);
    p.integer(2).op(0x88).integer(3);  // True: 3
    p.op('u').op('.');
    auto r = flood_run(p.b);
    REQUIRE(r->root.ok());
    const auto& g = r->model.graph;
    const auto items = g.at(*r->root).items;
    REQUIRE(items.size() == 2 * (ints.size() + 1));
    for (size_t i = 0; i < ints.size(); i += 101) CHECK(g.at(items[2 * i]).i == ints[i]);
    CHECK(g.at(items[2 * ints.size()]).i == 1);
    CHECK(g.at(items[2 * ints.size() + 1]).i == 3);
    CHECK(flood_dict_keys_keyed(*r, *r->root));
  }
  SECTION("a state dict's names stay on the fast hash") {
    Pickle p;
    p.op(0x80).op(2).op('}').op('(');
    for (int i = 0; i < 20000; ++i) p.str("layers." + std::to_string(i) + ".weight").integer(i);
    p.op('u').op('.');
    auto r = flood_run(p.b);
    REQUIRE(r->root.ok());
    CHECK(r->model.graph.at(*r->root).items.size() == 40000);
    CHECK_FALSE(flood_dict_keys_keyed(*r, *r->root));
  }
}

TEST_CASE("far memo keys a multiple of the bucket count apart spread over KeyedHash's buckets", "[hash]") {
  // std::hash of an integer is the integer (libstdc++): keys P, 2P, 3P ... share bucket 0 of
  // a table of P buckets. The VM's far memo keys (PUT 1000000000) are such keys.
  std::unordered_map<uint64_t, uint32_t, ptread::detail::KeyedHash> far;
  far.reserve(30000);
  const uint64_t buckets = far.bucket_count();
  for (uint64_t j = 1; j <= 20000; ++j) far.emplace(buckets * j, 0);
  REQUIRE(far.bucket_count() == buckets);
  size_t most = 0;
  for (size_t b = 0; b < far.bucket_count(); ++b) most = std::max(most, far.bucket_size(b));
  CHECK(most <= 16);
  // And the VM reads such a pickle: PUT at those keys, then GET of each.
  Pickle p;
  p.op(0x80).op(2).op('(');
  for (uint64_t j = 1; j <= 20000; ++j) p.integer(static_cast<int64_t>(j)).raw("p" + std::to_string(buckets * j) + "\n0");
  for (uint64_t j = 1; j <= 20000; j += 999) p.raw("g" + std::to_string(buckets * j) + "\n");
  p.op('l').op('.');
  auto r = flood_run(p.b);
  REQUIRE(r->root.ok());
  const auto& g = r->model.graph;
  const auto items = g.at(*r->root).items;
  REQUIRE(items.size() == 21);
  for (size_t k = 0; k < items.size(); ++k) CHECK(g.at(items[k]).i == static_cast<int64_t>(1 + 999 * k));
}
