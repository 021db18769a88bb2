// RunTemplate (pickle/run_template.hpp): after a TensorRun read opcode by opcode, the next
// runs of the same shape are read by comparing their bytes with it and decoding only what
// differs (the storage key's text, the memo put keys, the ints). The reference is the VM
// with TensorRuns off: every pickle here must leave the same Model (tests/support/
// model_dump.hpp) or fail with the same error, and the tests check that the template did
// read the runs it should (a template never taken would pass every comparison).
#include <catch2/catch.hpp>

#include "support/torch_pickles.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

using namespace ptread_test;

namespace {

// How the n runs after the first tensor vary (run i, from 1).
struct Shape {
  bool memoize = false;                     // protocol 4: MEMOIZE and SHORT_BINUNICODE
  bool pid_none = false;                    // persistent ids of six items, the last None
  std::function<std::vector<int64_t>(int)> size;  // contiguous but for the dims of size 1:
  std::function<int64_t(int)> wide;               // their strides (K, M, J or LONG1 by value)
  std::function<int64_t(int)> offset;
  std::function<bool(int)> grad;
};

// {'a': t0 (which names the globals), 'b': run 1, 'k2': run 2, ..., 'pad': text, then each
// value of the last three runs by its memo key}: storage keys "1" to "n" (one digit, then
// two), numel just enough for each view. The gets make the values the runs left lazy in
// the memo (by reading the run again) and take the tensors the runs made: they differ if
// a run read by the template wrote other memo entries than its opcodes would.
Bytes runs_pickle(const Shape& s, int n) {
  Pickle p;
  Memo m;
  const RunKeys k0 = dict_with_first_tensor(p, m, s.memoize, false);
  std::vector<RunKeys> keys;
  for (int i = 1; i <= n; ++i) {
    TensorSpecIn t;
    t.key = std::to_string(i);
    t.size = s.size(i);
    t.stride.assign(t.size.size(), 0);
    int64_t last = 0;
    for (size_t d = t.size.size(); d-- > 0;) {
      t.stride[d] = d + 1 == t.size.size() ? 1 : t.size[d] == 1 ? s.wide(i) : t.stride[d + 1] * t.size[d + 1];
      last += (t.size[d] - 1) * t.stride[d];
    }
    t.offset = s.offset(i);
    t.numel = t.offset + last + 1;
    t.requires_grad = s.grad(i);
    t.pid_none = s.pid_none;
    keys.push_back(tensor(p, m, t, &k0));
    if (i < n) {
      p.str("k" + std::to_string(i + 1));
      m.put(p);
    }
  }
  p.str("pad").str(std::string(400, '-'));
  for (size_t r = keys.size() >= 3 ? keys.size() - 3 : 0; r < keys.size(); ++r) {
    const RunKeys& k = keys[r];
    for (uint32_t key : {k.key, k.pid, k.size, k.stride, k.hooks, k.args, k.tensor}) {
      if (key == 0) continue;  // (no put: an empty size or stride)
      p.str("m" + std::to_string(key));
      m.put(p);
      p.get(key);
    }
  }
  p.op('u').op('.');
  return p.b;
}

struct TemplateRead {
  std::string on, off;
  size_t taken = 0, by_template = 0;
};
TemplateRead read_both(const Bytes& b) {
  TemplateRead r;
  r.off = ptread_test::run_pickle(b, false);
  r.on = ptread_test::run_pickle(b, true, {}, &r.taken, &r.by_template);
  return r;
}

}  // namespace

TEST_CASE("run template: runs of one shape are read by it, each hole as the opcodes read it", "[runs][template]") {
  // Every hole varies from run to run: the key (one digit, then two), the memo put keys
  // (BINPUT, then LONG_BINPUT past key 255; or MEMOIZE), numel, offset and a stride in
  // each int opcode (K, M, J, LONG1); requires_grad now and then. Where the bytes of a
  // run's shape change, the run is read in full and the next one of the new shape makes
  // the template again.
  Shape s;
  s.size = [](int) { return std::vector<int64_t>{1, 3}; };
  s.wide = [](int i) -> int64_t {
    return i < 15 ? 100 + i : i < 30 ? 300 + 997 * i : i < 45 ? 70000 + i : (int64_t{1} << 40) + i;
  };
  s.offset = [](int i) -> int64_t { return i % 3; };
  s.grad = [](int i) { return i % 17 == 0; };
  for (bool memoize : {false, true}) {
    s.memoize = memoize;
    INFO("memoize " << memoize);
    const TemplateRead r = read_both(runs_pickle(s, 60));
    REQUIRE(r.off.find("named:") != std::string::npos);  // it reads
    CHECK(r.on == r.off);
    CHECK(r.taken == 60);
    // Read in full: run 1, and at most the first two of each new shape (keys of two digits,
    // LONG_BINPUT, stride M, J, LONG1, and around each requires_grad): 60 - 1 - 2 * 9.
    CHECK(r.by_template >= 41);
    CHECK(r.by_template < r.taken);
  }
}

TEST_CASE("run template: ranks 0 to 8, a persistent id ending in None, sizes as MARK ... TUPLE", "[runs][template]") {
  for (int rank : {0, 1, 3, 4, 8}) {
    INFO("rank " << rank);
    Shape s;
    s.pid_none = rank % 2 == 1;
    s.size = [rank](int i) {
      std::vector<int64_t> v(static_cast<size_t>(rank), 1);
      if (rank > 0) v.back() = 2 + i % 3;
      return v;
    };
    s.wide = [](int i) -> int64_t { return 7 + i; };
    s.offset = [](int i) -> int64_t { return i % 2; };
    s.grad = [](int) { return false; };
    const TemplateRead r = read_both(runs_pickle(s, 12));
    REQUIRE(r.off.find("named:") != std::string::npos);
    CHECK(r.on == r.off);
    CHECK(r.taken == 12);
    CHECK(r.by_template >= 9);  // runs 2 to 9; 10 and 11 (two-digit keys) in full, 12 by template
  }
}

TEST_CASE("run template: runs of two shapes in turn are read by it half the time", "[runs][template]") {
  // Two shapes of the same size in turn (requires_grad on every other run), then of two
  // sizes (rank 1 and rank 2 in turn): a template never reads two runs in a row, so new
  // ones are made less and less often, and the one kept reads every other run.
  Shape s;
  s.wide = [](int i) -> int64_t { return 5 + i % 7; };
  s.offset = [](int i) -> int64_t { return i % 2; };
  for (int c = 0; c < 2; ++c) {
    INFO((c == 0 ? "requires_grad in turn" : "ranks in turn"));
    s.size = [c](int i) { return c == 1 && i % 2 ? std::vector<int64_t>{4} : std::vector<int64_t>{1, 4}; };
    s.grad = [c](int i) { return c == 0 && i % 2 == 1; };
    const TemplateRead r = read_both(runs_pickle(s, 90));
    REQUIRE(r.off.find("named:") != std::string::npos);
    CHECK(r.on == r.off);
    CHECK(r.taken == 90);
    CHECK(r.by_template >= 25);  // (not every other one: templates of either shape come and go)
    CHECK(r.by_template <= 45);
  }
}

TEST_CASE("run template: a run whose gets' memo entries were overwritten is read in full", "[runs][template]") {
  // Runs 1 to 4 make and use a template; then the entry of the storage class the runs get
  // is overwritten (BINPUT of a key in use: torch never does it) with a text, so the gets
  // of runs 5 to 8 give a text where the class was: the opcodes refuse them (the hooks
  // decline: it is not a class) and so must the template, whose cached values are stale.
  Pickle p;
  Memo m;
  const RunKeys k0 = dict_with_first_tensor(p, m, false, false);
  for (int i = 1; i <= 8; ++i) {
    if (i == 5) {
      p.str("o").str("not a class");
      p.put(k0.cls);
      p.str("k5");
      m.put(p);
    }
    TensorSpecIn t;
    t.key = std::to_string(i);
    t.size = {6};
    t.stride = {1};
    tensor(p, m, t, &k0);
    if (i < 8 && i != 4) {
      p.str("k" + std::to_string(i + 1));
      m.put(p);
    }
  }
  p.str("pad").str(std::string(400, '-'));
  p.op('u').op('.');
  const TemplateRead r = read_both(p.b);
  CHECK(r.on == r.off);
  CHECK(r.taken == 4);        // runs 5 to 8 go opcode by opcode (and fail there, as off)
  CHECK(r.by_template == 3);  // runs 2 to 4
}

TEST_CASE("run template: every one-byte change and cut of runs read by it reads the same on and off",
          "[runs][template][sweep_runs]") {
  Shape s;
  s.size = [](int) { return std::vector<int64_t>{2, 3}; };
  s.wide = [](int) -> int64_t { return 0; };
  s.offset = [](int i) -> int64_t { return i; };
  s.grad = [](int) { return false; };
  for (bool memoize : {false, true}) {
    s.memoize = memoize;
    const Bytes base = runs_pickle(s, 6);
    {
      const TemplateRead r = read_both(base);
      REQUIRE(r.on == r.off);
      REQUIRE(r.by_template == 5);  // runs 2 to 6: the sweep changes runs the template reads
    }
    // The bytes of runs 4 to 6, from the key before them to the text after them.
    auto find = [&base](const std::string& text) {
      const auto at = std::search(base.begin(), base.end(), text.begin(), text.end());
      return static_cast<size_t>(at - base.begin());
    };
    const size_t from = find(std::string("X\x02\0\0\0k4", 7)), to = find(std::string("X\x03\0\0\0pad", 8)) + 8;
    REQUIRE(from < to);
    REQUIRE(to < base.size());
    size_t differ = 0, cases = 0;
    auto compare = [&](const Bytes& b) {
      ++cases;
      const TemplateRead r = read_both(b);
      if (r.on != r.off) {
        ++differ;
        UNSCOPED_INFO("bytes " << b.size() << "\noff: " << r.off.substr(0, 400) << "\non:  " << r.on.substr(0, 400));
      }
    };
    for (size_t n = from; n <= to; ++n) compare(Bytes(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(n)));
    const uint8_t values[] = {0x00, 0x01, 0x02, 0x03, 0x05, 0x1f, 0x7f, 0x80, 0xc3, 0xff, 'K', 'M', 'J', 'N', 'Q', 'R',
                              't',  'q',  'r',  'h',  'j',  '(',  ')',  0x85, 0x86, 0x88, 0x89, 0x8a, 0x94, 'X', 0x8c, '.'};
    for (size_t k = from; k < to; ++k) {
      for (uint8_t v : values) {
        if (base[k] == v) continue;
        Bytes b = base;
        b[k] = v;
        compare(b);
      }
    }
    INFO("memoize " << memoize << ": " << cases << " pickles");
    CHECK(differ == 0);
  }
}
