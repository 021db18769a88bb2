// TensorRuns (pickle.hpp): the VM reads torch's opcodes for one tensor in one go, and makes
// the values in between (persistent id, size and stride tuples, hooks dict, argument tuple)
// only when the pickle gets them from the memo later. The reference is the same VM with
// TensorRuns off, opcode by opcode: every checkpoint and every pickle here must leave the
// same Model both ways (tests/support/model_dump.hpp: the tree with its sharing, tensor
// specs, storages, names), or fail with the same error text.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"
#include "support/model_dump.hpp"
#include "support/torch_pickles.hpp"


#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace ptread_test;

namespace {

// {'a': t0, 'b': t1, 'c': t2, 'pad': text, then every value of t1's and t2's runs by its
// memo key, twice}: the gets that make lazy values. (A run is read in one go only with
// PickleVM::kSlack bytes of pickle after it: the text is that room.)
Bytes lazy_gets_pickle(bool memoize, bool long_keys) {
  Pickle p;
  Memo m;
  const RunKeys k0 = dict_with_first_tensor(p, m, memoize, long_keys);
  TensorSpecIn t1;
  t1.key = "1";
  t1.size = {4, 1, 1, 2};  // MARK ... TUPLE
  t1.stride = {2, 2, 2, 1};
  t1.numel = 8;
  t1.requires_grad = true;
  const RunKeys k1 = tensor(p, m, t1, &k0);
  p.str("c");
  m.put(p);
  TensorSpecIn t2;
  t2.key = "2";
  t2.size = {};
  t2.stride = {};
  t2.numel = 1;
  t2.offset = 0;
  t2.pid_none = true;
  t2.new_location = true;
  const RunKeys k2 = tensor(p, m, t2, &k0);
  p.str("pad").str(std::string(400, '-'));
  for (int twice = 0; twice < 2; ++twice) {
    for (uint32_t key : {k1.pid, k1.size, k1.stride, k1.hooks, k1.args, k1.key, k1.tensor, k2.pid, k2.args, k2.location}) {
      p.str("m" + std::to_string(key) + "_" + std::to_string(twice));
      m.put(p);
      p.get(key);
    }
  }
  p.op('u').op('.');
  return p.b;
}

// {'a': t0, 'b': t1, 'c': t2, 'd': t3, 'pad': text, then gets}: t1's storage key is new
// text, which t2 and t3 (views of the same storage, as torch pickles tensors that share
// one) get from the memo; then the lazy values that hold that key, and the key itself.
Bytes shared_key_pickle(bool memoize) {
  Pickle p;
  Memo m;
  const RunKeys k0 = dict_with_first_tensor(p, m, memoize, false);
  TensorSpecIn t1;
  t1.key = "1";
  t1.size = {6};
  t1.stride = {1};
  const RunKeys k1 = tensor(p, m, t1, &k0);
  p.str("c");
  m.put(p);
  TensorSpecIn t2;
  t2.key_get = k1.key;
  t2.offset = 2;
  t2.size = {2, 2};
  t2.stride = {1, 2};
  const RunKeys k2 = tensor(p, m, t2, &k0);
  p.str("d");
  m.put(p);
  TensorSpecIn t3;
  t3.key_get = k1.key;
  t3.size = {3};
  t3.stride = {2};
  const RunKeys k3 = tensor(p, m, t3, &k0);
  (void)k3;
  p.str("pad").str(std::string(400, '-'));
  for (uint32_t key : {k2.pid, k1.pid, k1.key, k2.args}) {
    p.str("m" + std::to_string(key));
    m.put(p);
    p.get(key);
  }
  p.op('u').op('.');
  return p.b;
}

// Runs with lazy values, then memo entries the runs read or wrote overwritten (BINPUT of
// a key in use: torch never does it), then gets of every lazy value. A lazy value is made
// by reading its run again, so the entries it read must still be what the run read: the
// VM makes every lazy value before the first overwrite (`overwrite`: which entries, by
// their place in the RunKeys of the second run; `early`: a get of one lazy value before
// the overwrite too).
Bytes overwrite_pickle(bool memoize, const std::vector<uint32_t RunKeys::*>& overwrite, bool early) {
  Pickle p;
  Memo m;
  const RunKeys k0 = dict_with_first_tensor(p, m, memoize, false);
  TensorSpecIn t1;
  t1.key = "1";
  t1.requires_grad = true;
  const RunKeys k1 = tensor(p, m, t1, &k0);
  p.str("c");
  m.put(p);
  TensorSpecIn t2;
  t2.key = "2";
  t2.size = {6};
  t2.stride = {1};
  const RunKeys k2 = tensor(p, m, t2, &k0);
  p.str("pad").str(std::string(400, '-'));
  if (early) p.str("early").get(k2.pid);
  uint32_t n = 0;
  for (uint32_t RunKeys::*which : overwrite) {
    p.str("o" + std::to_string(n)).str("overwritten" + std::to_string(n));
    p.put(k1.*which);  // an explicit key, also in protocol 4
    ++n;
  }
  for (const RunKeys& k : {k1, k2}) {
    for (uint32_t key : {k.pid, k.size, k.stride, k.hooks, k.args, k.key, k.location, k.tensor}) {
      p.str("m" + std::to_string(key));
      p.get(key);
    }
  }
  p.op('u').op('.');
  return p.b;
}

}  // namespace

TEST_CASE("tensor runs: memo entries overwritten after a run: its lazy values read what the run read", "[runs]") {
  using W = std::vector<uint32_t RunKeys::*>;
  // The entries the runs got (tag, class, location, hooks class), the run's own texts and
  // lazy values, and several at once.
  const W cases[] = {{&RunKeys::location}, {&RunKeys::storage}, {&RunKeys::cls}, {&RunKeys::od},
                     {&RunKeys::key},      {&RunKeys::pid},     {&RunKeys::size}, {&RunKeys::args},
                     {&RunKeys::location, &RunKeys::key, &RunKeys::od, &RunKeys::hooks}};
  for (bool memoize : {false, true}) {
    for (bool early : {false, true}) {
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        INFO("memoize " << memoize << ", early " << early << ", case " << c);
        const Bytes b = overwrite_pickle(memoize, cases[c], early);
        size_t taken = 0;
        const std::string off = run_pickle(b, false), on = run_pickle(b, true, {}, &taken);
        REQUIRE(off.find("named:") != std::string::npos);  // it reads
        CHECK(taken == 2);                                 // t1 and t2 as runs
        CHECK(on == off);
      }
    }
  }
}

TEST_CASE("tensor runs: a storage key read as text by one run and gotten by later runs", "[runs]") {
  for (bool memoize : {false, true}) {
    INFO("memoize " << memoize);
    const Bytes b = shared_key_pickle(memoize);
    size_t taken = 0;
    const std::string off = run_pickle(b, false), on = run_pickle(b, true, {}, &taken);
    REQUIRE(off.find("named:") != std::string::npos);  // it reads
    // The persistent ids gotten after the runs hold the key node the memo gives, shared as
    // the opcodes share it (the dump shows sharing).
    CHECK(on == off);
    CHECK(taken == 3);  // t1, t2 and t3 as runs
    // '0' and '1' (t2 and t3 view t1's), each of the 6 floats its first reference names,
    // though the loader has 96 bytes for them (torch.load cuts a longer record so)
    CHECK(off.find("storages: 24 24\n") != std::string::npos);
  }
}

TEST_CASE("tensor runs: every fixture and corpus checkpoint reads the same with runs on and off", "[runs]") {
  std::vector<std::string> files = checkpoint_files(fixture_dir());
  for (const std::string& f : checkpoint_files(corpus_dir() + "/files")) files.push_back(f);
  REQUIRE(files.size() >= 40);
  for (const std::string& path : files) {
    INFO(path);
    const Bytes file = read_file(path);
    const std::string off = read_model(file, false), on = read_model(file, true);
    CHECK(on == off);
  }
}

TEST_CASE("tensor runs: a state dict of many tensors takes the runs (far fewer nodes)", "[runs]") {
  const Bytes file = read_file(fixture_dir() + "/many.pt");  // 5,000 tensors
  size_t nodes_on = 0, nodes_off = 0;
  const std::string on = read_model(file, true, &nodes_on), off = read_model(file, false, &nodes_off);
  REQUIRE(on == off);
  REQUIRE(on.find("named:") != std::string::npos);
  // Opcode by opcode, each tensor makes its key, storage key, persistent id, storage, size,
  // stride, hooks dict, arguments and tensor nodes; a run only the key and the tensor (its
  // storage key stays in the pickle until something gets it from the memo).
  CHECK(nodes_off >= 5000 * 8);
  CHECK(nodes_on <= 5000 * 2 + 1000);
}

TEST_CASE("tensor runs: values gotten from the memo after a run are made as the opcodes make them", "[runs]") {
  for (bool memoize : {false, true}) {
    for (bool long_keys : {false, true}) {
      if (memoize && long_keys) continue;
      INFO("memoize " << memoize << ", long keys " << long_keys);
      const Bytes b = lazy_gets_pickle(memoize, long_keys);
      const std::string off = run_pickle(b, false), on = run_pickle(b, true);
      REQUIRE(off.find("named:") != std::string::npos);  // it reads
      CHECK(on == off);
      // The argument tuple of 'b' and its parts, shared as the opcodes share them.
      CHECK(off.find("S(s1 F32 'cuda:1')") != std::string::npos);
      // t1 and t2 were read as runs (t0 names its globals: opcode by opcode).
      size_t taken = 0;
      run_pickle(b, true, {}, &taken);
      CHECK(taken == 2);
    }
  }
}

TEST_CASE("tensor runs: every prefix and many one-byte changes of a run read the same on and off", "[runs][sweep_runs]") {
  const Bytes base = lazy_gets_pickle(false, false);
  size_t differ = 0, cases = 0;
  auto compare = [&](const Bytes& b) {
    ++cases;
    const std::string off = run_pickle(b, false), on = run_pickle(b, true);
    if (on != off) {
      ++differ;
      UNSCOPED_INFO("bytes " << b.size() << "\noff: " << off.substr(0, 400) << "\non:  " << on.substr(0, 400));
    }
  };
  for (size_t n = 0; n <= base.size(); ++n) compare(Bytes(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(n)));
  const uint8_t values[] = {0x00, 0x01, 0x02, 0x05, 0x07, 0x0a, 0x7f, 0x80, 0xff, 'K', 'M', 'J', 'N', 'Q', 'R', 't', 'q',
                            'r', 'h', 'j', '(', ')', 0x85, 0x86, 0x88, 0x89, 0x8a, 0x94, 'X', 0x8c, '.'};
  for (size_t k = 0; k < base.size(); ++k) {
    for (uint8_t v : values) {
      if (base[k] == v) continue;
      Bytes b = base;
      b[k] = v;
      compare(b);
    }
  }
  INFO(cases << " pickles");
  CHECK(differ == 0);
}

TEST_CASE("tensor runs: errors inside later runs are the opcodes' errors", "[runs]") {
  // t1 names a storage class ptread does not know, a missing storage, a view past its
  // storage; a limit on the memo reached inside a run; a rank over Limits::max_rank.
  struct Case {
    const char* what;
    const char* cls;
    TensorSpecIn t;
    ptread::Limits limits;
  };
  std::vector<Case> cases;
  {
    Case c{"missing storage", "FloatStorage", {}, {}};
    c.t.key = "x";
    cases.push_back(c);
  }
  {
    Case c{"view past storage", "FloatStorage", {}, {}};
    c.t.key = "1";
    c.t.offset = 100;
    cases.push_back(c);
  }
  {
    Case c{"storage too small", "FloatStorage", {}, {}};
    c.t.key = "1";
    c.t.numel = 1000;
    cases.push_back(c);
  }
  {
    Case c{"memo limit", "FloatStorage", {}, {}};
    c.t.key = "1";
    c.limits.max_memo_entries = 17;  // reached at t1's size tuple, inside the run
    cases.push_back(c);
  }
  {
    Case c{"rank limit", "FloatStorage", {}, {}};
    c.t.key = "1";
    c.limits.max_rank = 1;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    INFO(c.what);
    Pickle p;
    Memo m;
    dict_start(p, m);
    TensorSpecIn t0;
    t0.size = {6};
    t0.stride = {1};
    const RunKeys k0 = tensor(p, m, t0, nullptr, c.cls);
    p.str("b");
    m.put(p);
    tensor(p, m, c.t, &k0);
    p.str("pad").str(std::string(400, '-')).op('u').op('.');  // room for a run (kSlack)
    const std::string off = run_pickle(p.b, false, c.limits), on = run_pickle(p.b, true, c.limits);
    CHECK(off.find("named:") == std::string::npos);  // an error
    CHECK(on == off);
  }
  // An unknown storage class on a later tensor only: a memo get of a new global.
  Pickle p;
  Memo m;
  dict_start(p, m);
  const RunKeys k0 = tensor(p, m, {}, nullptr);
  p.global("torch", "NoSuchStorage");
  RunKeys k1 = k0;
  k1.cls = m.put(p);
  p.op('0').str("b");  // POP the global, it stays in the memo
  m.put(p);
  TensorSpecIn t1;
  t1.key = "1";
  tensor(p, m, t1, &k1);
  p.str("pad").str(std::string(400, '-')).op('u').op('.');
  const std::string off = run_pickle(p.b, false), on = run_pickle(p.b, true);
  CHECK(off.find("NoSuchStorage") != std::string::npos);
  CHECK(on == off);
}

TEST_CASE("tensor runs: SegmentedVector::truncate drops elements and reuses their blocks", "[runs]") {
  // Blocks hold 256, 512, 1024 ... elements; truncate back across their boundaries, grow
  // again past them, and every element reads what was written last.
  ptread::detail::SegmentedVector<uint32_t> v;
  std::vector<uint32_t> ref;
  uint32_t next = 1;
  auto grow_to = [&](size_t n) {
    while (ref.size() < n) {
      v.push_back(next);
      ref.push_back(next++);
    }
  };
  for (size_t cut : {size_t{1000}, size_t{767}, size_t{768}, size_t{256}, size_t{0}, size_t{255}, size_t{5000}, size_t{1791}}) {
    grow_to(cut + 700);
    v.truncate(cut);
    ref.resize(cut);
    REQUIRE(v.size() == cut);
    grow_to(cut + 900);
    REQUIRE(v.size() == ref.size());
    bool same = true;
    for (size_t k = 0; k < ref.size(); ++k) same = same && v[k] == ref[k];
    CHECK(same);
  }
  v.truncate(v.size() + 10);  // no-op past the end
  CHECK(v.size() == ref.size());
}

TEST_CASE("tensor runs: the longest run reads only the pickle's bytes, cut anywhere", "[runs]") {
  // Long memo keys (LONG_BINPUT / LONG_BINGET), ints of 8 bytes (LONG1), rank 8 sizes and
  // strides (MARK ... TUPLE): the most a run reads between its texts. The pickle is cut at
  // every byte of that run and after it, each cut copied into a buffer of exactly its size:
  // a read past the end is a heap overflow under the sanitizers.
  Pickle p;
  Memo m;
  dict_start(p, m);
  p.op(']');  // a list of 300 memoized strings: memo keys past 255 from here
  m.put(p);
  for (int k = 0; k < 300; ++k) {
    p.str("s");
    m.put(p);
  }
  p.op('0');  // POP the list
  const RunKeys k0 = tensor(p, m, {}, nullptr);
  p.str("b");
  m.put(p);
  const size_t run_start = p.b.size();
  TensorSpecIn t1;
  t1.key = "1";
  t1.numel = int64_t{1} << 40;  // more than the storage holds: an error either way
  t1.offset = int64_t{1} << 41;
  t1.size = std::vector<int64_t>(8, int64_t{1} << 33);
  t1.stride = std::vector<int64_t>(8, int64_t{1} << 34);
  t1.new_location = true;
  tensor(p, m, t1, &k0);
  p.str("pad").str(std::string(400, '-')).op('u').op('.');
  size_t cuts = 0, same = 0;
  for (size_t n = run_start; n <= p.b.size(); ++n) {
    std::unique_ptr<uint8_t[]> exact(new uint8_t[n]);
    std::memcpy(exact.get(), p.b.data(), n);
    auto run = [&](bool runs) {
      ptread::detail::Model model;
      ptread::Limits limits;
      ptread::detail::TorchHooks hooks(model, test_storages(), limits);
      ptread::detail::PickleVM vm(model.graph, hooks, limits, "test.pkl");
      vm.set_tensor_runs(runs);
      auto root = vm.run(exact.get(), n);
      return root ? std::string("read") : root.error().str();
    };
    ++cuts;
    same += run(true) == run(false) ? 1 : 0;
  }
  CHECK(same == cuts);
}

TEST_CASE("names: a root dict's tensors under string keys are named by their keys, as the general walk names the rest", "[runs][names]") {
  // {'a': t, 'b': t, 7: t, 'n': {'x': t}, 'same': a's tensor again, 's': 'text', '': t}:
  // the root's string-keyed tensors take the naming's short way (Namer::list_root_entry),
  // an int key, a nested dict and a text value the general walk.
  Pickle p;
  Memo m;
  dict_start(p, m);
  TensorSpecIn t;
  const RunKeys k0 = tensor(p, m, t, nullptr);
  p.str("b");
  m.put(p);
  t.key = "1";
  tensor(p, m, t, &k0);
  p.integer(7);
  t.key = "2";
  tensor(p, m, t, &k0);
  p.str("n");
  m.put(p);
  p.op('}');
  m.put(p);
  p.str("x");
  m.put(p);
  t.key = "3";
  tensor(p, m, t, &k0);
  p.op('s');  // SETITEM into the inner dict
  p.str("same");
  m.put(p);
  p.get(k0.tensor);
  p.str("s").str("text");
  p.str("");
  t.key = "4";
  tensor(p, m, t, &k0);
  p.str("pad").str(std::string(400, '-')).op('u').op('.');  // room for a run (kSlack)

  auto names = [&p](size_t max_tensors, std::string* error) {
    ptread::Limits limits;
    limits.max_tensors = max_tensors;
    ptread::detail::Model model;
    ptread::detail::TorchHooks hooks(model, test_storages(), limits);
    ptread::detail::PickleVM vm(model.graph, hooks, limits, "test.pkl");
    auto root = vm.run(p.b.data(), p.b.size());
    REQUIRE(root.ok());
    model.root = *root;
    REQUIRE(hooks.finish().ok());
    std::vector<std::string> out;
    if (auto st = ptread::detail::name_tensors(model, limits, p.b.size()); !st) {
      *error = st.error().str();
      return out;
    }
    for (size_t k = 0; k < model.listed_count(); ++k) out.emplace_back(model.listed_name(k));
    // Each tensor's home is the first name listing it: 'same' is a's second name.
    CHECK(model.tensor_home.size() == 5);
    for (size_t s = 0; s < model.tensor_home.size(); ++s) CHECK(model.tensor_home[s] == (s < 4 ? s : 5));
    return out;
  };
  std::string error;
  CHECK(names(1000, &error) == std::vector<std::string>{"a", "b", "7", "n.x", "same", ""});
  CHECK(error.empty());
  // The limit stops the short way as it stops the walk: at the entry over it.
  for (size_t max = 0; max < 6; ++max) {
    INFO("max_tensors " << max);
    error.clear();
    CHECK(names(max, &error).empty());
    CHECK(error.find("more tensors than Limits::max_tensors") != std::string::npos);
  }
}
