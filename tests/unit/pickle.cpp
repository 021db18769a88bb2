// The pickle VM (include/ptread/pickle.hpp) with torch's hooks, against Python's own pickle.
//
// tests/fixtures/pickles.json (written by tests/fixtures/gen_pickles.py) holds pickles of
// builtin objects in protocols 0 to 5 with repr(pickle.loads(bytes)) as Python computes it,
// and hand-written pickles that Python rejects, each with the ErrorCode ptread must give.
// Each case is run through detail::PickleVM + detail::TorchHooks and the root printed with
// detail::python_str(graph, root, /*repr=*/true), which must equal Python's repr exactly.
//
// Direct tests below cover the memo (MEMOIZE, BINPUT, LONG_BINPUT, PUT), pickles that
// follow each other in one buffer, Limits, and 100000 nested lists (the VM is iterative).
#include <catch2/catch.hpp>

#include "support/canon_repr.hpp"
#include "support/helpers.hpp"

#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace ptread_test;

namespace {

using Bytes = std::vector<uint8_t>;

const Json& pickle_cases() {
  static Json j;
  static bool loaded = false;
  if (!loaded) {
    // PTREAD_FIXTURES may point at freshly generated checkpoints, which have no
    // pickles.json; the checked-in one is the fallback.
    std::string path = fixture_dir() + "/pickles.json";
    if (!path_exists(path)) path = std::string(PTREAD_TEST_FIXTURES) + "/pickles.json";
    std::string err;
    if (!read_json_file(path, j, &err)) FAIL("cannot read " << path << ": " << err);
    loaded = true;
  }
  return j;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool from_hex(const std::string& h, Bytes* out) {
  out->clear();
  if (h.size() % 2 != 0) return false;
  for (size_t k = 0; k < h.size(); k += 2) {
    const int hi = hex_digit(h[k]), lo = hex_digit(h[k + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<uint8_t>(hi * 16 + lo));
  }
  return true;
}

Bytes& operator<<(Bytes& b, const std::string& s) {
  b.insert(b.end(), s.begin(), s.end());
  return b;
}

ptread::detail::StorageLoader no_storages() {
  return [](std::string_view key, uint64_t, ptread::DType) -> ptread::Result<std::shared_ptr<const ptread::Storage>> {
    return ptread::make_error(ptread::ErrorCode::record_missing, "no storage '" + std::string(key) + "' in a pickle test");
  };
}

// One pickle run as read_zip_checkpoint runs data.pkl: a Model, TorchHooks, PickleVM.
struct Run {
  ptread::detail::Model model;
  ptread::Limits limits;
  size_t consumed = 0;
  ptread::Result<uint32_t> root = ptread::make_error(ptread::ErrorCode::ok, "not run");

  const ptread::detail::Graph& graph() const { return model.graph; }
  std::string repr() const {
    return root.ok() ? ptread::detail::python_str(model.graph, *root, /*repr=*/true) : root.error().str();
  }
};

// The pickle run once, into r, flat or (unframed set) as torch.load's unpickler reads it;
// returns whether torch.load may read it otherwise (PickleVM::torch_reads_otherwise()).
bool run_once(Run* r, const uint8_t* data, size_t n, const ptread::detail::UnframedPickle* unframed) {
  ptread::detail::TorchHooks hooks(r->model, no_storages(), r->limits);
  ptread::detail::PickleVM vm(r->model.graph, hooks, r->limits, "test.pkl");
  vm.set_unframed(unframed);
  r->root = vm.run(data, n, &r->consumed);
  return vm.torch_reads_otherwise();
}

std::unique_ptr<Run> run_pickle(const Bytes& data, const ptread::Limits& limits = ptread::Limits{}) {
  auto r = std::make_unique<Run>();
  r->limits = limits;
  // As the zip reader takes a torch.save archive's data.pkl (read_zip_pickles): read again
  // as torch.load's unpickler reads it where that reads otherwise.
  if (run_once(r.get(), data.data(), data.size(), nullptr)) {
    const auto unframed = ptread::detail::unframe_as_torch_load(data.data(), data.size());
    r = std::make_unique<Run>();
    r->limits = limits;
    run_once(r.get(), unframed.bytes.data(), unframed.bytes.size(), &unframed);
  }
  return r;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Opcodes that memoize t0 = (1, 1), t(k+1) = (tk, tk) at memo[memo + k]: 2^depth leaves in
// 8 bytes a level (gen_pickles.py's shared_tuples).
void shared_tuples(Bytes* p, uint8_t depth, uint8_t memo) {
  const uint8_t t0[] = {'K', 1, 'K', 1, 0x86, 'q', memo, '0'};
  p->insert(p->end(), t0, t0 + sizeof t0);
  for (uint8_t k = 1; k <= depth; ++k) {
    const uint8_t tk[] = {'h', static_cast<uint8_t>(memo + k - 1), 'h', static_cast<uint8_t>(memo + k - 1), 0x86, 'q',
                          static_cast<uint8_t>(memo + k), '0'};
    p->insert(p->end(), tk, tk + sizeof tk);
  }
}

}  // namespace

TEST_CASE("pickle: builtin objects read as Python's pickle.loads reads them", "[pickle][pickle_cases]") {
  const Json& cases = pickle_cases()["cases"];
  REQUIRE(cases.size() > 0);
  bool protocol_seen[6] = {false, false, false, false, false, false};
  size_t passed = 0, failed = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Json& c = cases[k];
    const std::string& name = c["name"].as_string();
    const int64_t protocol = c["protocol"].as_int();
    if (protocol >= 0 && protocol <= 5) protocol_seen[protocol] = true;
    const std::string& hex = c["hex"].as_string();
    INFO("case " << name << " (protocol " << protocol << "), pickle "
                 << (hex.size() <= 512 ? hex : hex.substr(0, 512) + "... (" + std::to_string(hex.size() / 2) + " bytes)"));
    Bytes data;
    CHECK(from_hex(hex, &data));
    auto r = run_pickle(data);
    CHECK(r->root.ok());
    // A case whose sets may hold their items in another order than Python's (a framed
    // random pickle, see canon_repr) has `canon`, compared in place of repr.
    const bool canon = c.contains("canon");
    const std::string& want = c[canon ? "canon" : "repr"].as_string();
    const std::string got = !r->root.ok() ? r->repr() : canon ? canon_repr(r->graph(), *r->root) : r->repr();
    CHECK(got == want);
    if (c.contains("stop_in")) {
      // A framed random pickle: its reading can end on a STOP byte before the last one
      // (gen_random_pickles.py), one of the bytes Python's unpickler read last.
      const Json& stop_in = c["stop_in"];
      INFO("consumed " << r->consumed << ", the STOP within bytes " << stop_in[0].as_int() << " to "
                       << stop_in[1].as_int() - 1);
      CHECK(r->consumed > static_cast<size_t>(stop_in[0].as_int()));
      CHECK(r->consumed <= static_cast<size_t>(stop_in[1].as_int()));
    } else {
      CHECK(r->consumed == (r->root.ok() ? data.size() : 0));
    }
    if (r->root.ok() && got == want) {
      ++passed;
    } else {
      ++failed;
    }
  }
  for (int p = 0; p <= 5; ++p) {
    INFO("protocol " << p);
    CHECK(protocol_seen[p]);
  }
  INFO(passed << " of " << cases.size() << " cases give Python's repr; " << failed << " do not");
  CHECK(failed == 0);
}

TEST_CASE("pickle: malformed and unsupported pickles fail with their code, opcode and byte", "[pickle][pickle_cases]") {
  const Json& errors = pickle_cases()["errors"];
  REQUIRE(errors.size() > 0);
  for (size_t k = 0; k < errors.size(); ++k) {
    const Json& e = errors[k];
    INFO("error case " << e["name"].as_string() << ", pickle '" << e["hex"].as_string() << "'");
    Bytes data;
    CHECK(from_hex(e["hex"].as_string(), &data));
    auto r = run_pickle(data);
    CHECK_FALSE(r->root.ok());
    if (r->root.ok()) continue;
    const ptread::Error& err = r->root.error();
    INFO("message: " << err.str());
    CHECK(std::string(ptread::error_code_name(err.code())) == e["code"].as_string());
    CHECK(contains(err.message(), "test.pkl"));
    if (e["opcode"].is_null()) {
      CHECK_FALSE(contains(err.message(), "opcode"));  // the input ended: no opcode is at fault
    } else {
      CHECK(contains(err.message(), "opcode " + e["opcode"].as_string()));
    }
    CHECK(contains(err.message(), "byte " + std::to_string(e["offset"].as_int()) + " of"));
  }
}

TEST_CASE("pickle: pickles torch.load's unpickling refuses are refused", "[pickle][pickle_cases]") {
  // "refused": a read crossing a frame's end that Python's unpickler on a BytesIO
  // (torch.load's) then fails on, where pickle.loads reads the pickle flat
  // (gen_pickles.py: the errors that are so; gen_random_pickles.py: pickles framed at random).
  const Json& refused = pickle_cases()["refused"];
  REQUIRE(refused.size() > 0);
  for (size_t k = 0; k < refused.size(); ++k) {
    const Json& e = refused[k];
    INFO("refused case " << e["name"].as_string() << ", pickle '" << e["hex"].as_string() << "'");
    Bytes data;
    CHECK(from_hex(e["hex"].as_string(), &data));
    auto r = run_pickle(data);
    CHECK_FALSE(r->root.ok());
  }
}

TEST_CASE("pickle: globals Python 3 cannot import are kept inert, as the pickle names them", "[pickle]") {
  // "unimportable": torch.load's unpickling fails to import a global (Python 2 module names
  // after a PROTO of 3 or more); ptread, importing nothing, makes an object of that class
  // and does not read it as the Python 3 class it would be below protocol 3. (Not in
  // [pickle_cases]: fresh_pickles' random pickles.json has no such section.)
  const Json& cases = pickle_cases()["unimportable"];
  REQUIRE(cases.size() > 0);
  for (size_t k = 0; k < cases.size(); ++k) {
    const Json& c = cases[k];
    INFO("case " << c["name"].as_string() << " (Python: " << c["python"].as_string() << "), pickle '"
                 << c["hex"].as_string() << "'");
    Bytes data;
    CHECK(from_hex(c["hex"].as_string(), &data));
    auto r = run_pickle(data);
    REQUIRE(r->root.ok());
    const ptread::detail::Graph& g = r->graph();
    REQUIRE(g.kind(*r->root) == ptread::ValueKind::object);
    const uint32_t cls = g.at(*r->root).items[ptread::detail::kObjClass];
    REQUIRE(g.kind(cls) == ptread::ValueKind::global);
    CHECK(std::string(g.global_module(cls)) + "." + std::string(g.global_name(cls)) == c["class"].as_string());
  }
}

TEST_CASE("pickle: the builtin calls of a file share one budget of items and bytes made", "[pickle]") {
  // bytes(n) given the same n again and again through the memo: a few pickle bytes a call,
  // n zero bytes each. All the calls share Limits::max_container_items (TorchContext::spend).
  ptread::Limits small;
  small.max_container_items = 1000;
  auto calls = [](int count, uint8_t n) {
    Bytes p = {0x80, 0x02, 'c'};
    p << std::string("__builtin__\nbytes\n");
    p.insert(p.end(), {'q', 0x00, 'K', n, 0x85, 'q', 0x01, '('});  // memo 0: the class, 1: (n,)
    for (int k = 0; k < count; ++k) p.insert(p.end(), {'h', 0x00, 'h', 0x01, 'R'});
    p.insert(p.end(), {'l', '.'});
    return p;
  };
  {
    auto r = run_pickle(calls(4, 250), small);  // 1000 bytes: at the budget
    REQUIRE(r->root.ok());
    CHECK(r->graph().at(*r->root).items.size() == 4);
  }
  {
    auto r = run_pickle(calls(5, 250), small);  // 1250
    REQUIRE_FALSE(r->root.ok());
    CHECK(r->root.error().code() == ptread::ErrorCode::limit_exceeded);
    CHECK(contains(r->root.error().message(), "Limits::max_container_items"));
  }
}

TEST_CASE("pickle: memo keys from MEMOIZE, BINPUT, LONG_BINPUT and PUT share one table", "[pickle]") {
  // Checked with Python: pickle.loads of these bytes is [7, 13, 9, 10, 11, 12, 12, 10].
  Bytes p = {0x80, 0x04};
  p << std::string("K\x07\x94" "0");                 // MEMOIZE: memo[0] = 7
  p << std::string("K\x08q\x05" "0");                // BINPUT: memo[5] = 8
  p << std::string("K\x09r\x10\x27\x00\x00" "0", 8); // LONG_BINPUT: memo[10000] = 9 (a far key)
  p << std::string("K\x0ap42\n0");                   // PUT text: memo[42] = 10
  p << std::string("K\x0b\x94" "0");                 // MEMOIZE: key len(memo) = 4, memo[4] = 11
  p << std::string("K\x0cr\x64\x00\x00\x00" "0", 8); // LONG_BINPUT: memo[100] = 12
  p << std::string("K\x0dq\x05" "0");                // BINPUT again: memo[5] = 13 replaces 8
  p << std::string("]");
  p << std::string("h\x00" "a", 3);                  // BINGET 0
  p << std::string("h\x05" "a");                     // BINGET 5
  p << std::string("j\x10\x27\x00\x00" "a", 6);      // LONG_BINGET 10000
  p << std::string("g42\na");                        // GET text 42
  p << std::string("h\x04" "a");                     // BINGET 4 (the second MEMOIZE)
  p << std::string("j\x64\x00\x00\x00" "a", 6);      // LONG_BINGET 100
  p << std::string("g100\na");                       // GET text 100
  p << std::string("h\x2a" "a.");                    // BINGET 42 (put by PUT text)
  auto r = run_pickle(p);
  REQUIRE(r->root.ok());
  CHECK(r->repr() == "[7, 13, 9, 10, 11, 12, 12, 10]");
  CHECK(r->consumed == p.size());

  SECTION("a memoized container is one node wherever it is fetched") {
    // [a, a, a, a] with a = [1] appended, then fetched by BINGET, LONG_BINGET and GET text
    Bytes q = {0x80, 0x02, ']', 'q', 0x00, ']', 'q', 0x01, 'K', 0x01, 'a', 'a',
               'h', 0x01, 'a', 'j', 0x01, 0x00, 0x00, 0x00, 'a'};
    q << std::string("g1\na.");
    auto s = run_pickle(q);
    REQUIRE(s->root.ok());
    CHECK(s->repr() == "[[1], [1], [1], [1]]");
    const auto& items = s->graph().at(*s->root).items;
    REQUIRE(items.size() == 4);
    CHECK(items[0] == items[1]);
    CHECK(items[0] == items[2]);
    CHECK(items[0] == items[3]);
  }
}

TEST_CASE("pickle: consumed tells where the next pickle in the buffer starts", "[pickle]") {
  // Two pickles back to back, as pickle.dump writes them twice to one file (the legacy
  // format is five of them). Each run() is one pickle.load(): a fresh memo, so the second
  // pickle cannot refer to the first's memo (torch's loader makes a new Unpickler for each).
  const Bytes first = {0x80, 0x02, ']', 'q', 0x00, 'K', 0x01, 'a', '.'};
  const Bytes second = {0x80, 0x02, 'K', 0x02, 'K', 0x03, 0x86, '.'};
  Bytes buf = first;
  buf.insert(buf.end(), second.begin(), second.end());
  buf.push_back('!');  // trailing garbage is not the VM's business once STOP is reached

  ptread::detail::Model model;
  ptread::Limits limits;
  ptread::detail::TorchHooks hooks(model, no_storages(), limits);
  ptread::detail::PickleVM vm(model.graph, hooks, limits, "two.pkl");
  size_t used1 = 0, used2 = 0;
  auto r1 = vm.run(buf.data(), buf.size(), &used1);
  REQUIRE(r1.ok());
  CHECK(used1 == first.size());
  CHECK(ptread::detail::python_str(model.graph, *r1, true) == "[1]");
  auto r2 = vm.run(buf.data() + used1, buf.size() - used1, &used2);
  REQUIRE(r2.ok());
  CHECK(used2 == second.size());
  CHECK(ptread::detail::python_str(model.graph, *r2, true) == "(2, 3)");
  // A memo reference to the previous pickle is an error, as in Python.
  const Bytes cross = {0x80, 0x02, 'h', 0x00, '.'};
  auto rc = vm.run(cross.data(), cross.size());
  CHECK(rc.code() == ptread::ErrorCode::pickle_malformed);
  // What is left is not a pickle.
  size_t used3 = 12345;
  auto r3 = vm.run(buf.data() + used1 + used2, 1, &used3);
  CHECK(r3.code() == ptread::ErrorCode::pickle_unknown_opcode);
  CHECK(used3 == 12345);
}

TEST_CASE("pickle: Limits bound the memo, the stack and containers", "[pickle]") {
  ptread::Limits small;
  small.max_memo_entries = 16;

  // EMPTY_LIST MEMOIZE MARK (K i MEMOIZE) x n APPENDS STOP: n + 1 memo entries.
  auto memoized_list = [](int n) {
    Bytes p = {0x80, 0x04, ']', 0x94, '('};
    for (int i = 0; i < n; ++i) {
      p.push_back('K');
      p.push_back(static_cast<uint8_t>(i));
      p.push_back(0x94);
    }
    p.push_back('e');
    p.push_back('.');
    return p;
  };
  {
    auto r = run_pickle(memoized_list(15), small);  // 16 entries: at the limit
    REQUIRE(r->root.ok());
    CHECK(r->graph().at(*r->root).items.size() == 15);
  }
  {
    auto r = run_pickle(memoized_list(16), small);  // 17 entries
    REQUIRE_FALSE(r->root.ok());
    CHECK(r->root.code() == ptread::ErrorCode::limit_exceeded);
    CHECK(contains(r->root.error().message(), "max_memo_entries"));
    CHECK(contains(r->root.error().message(), "MEMOIZE"));
    CHECK(contains(r->root.error().message(), "byte " + std::to_string(4 + 1 + 16 * 3 - 1) + " of"));
  }
  {
    // Storing one key again and again is one entry.
    Bytes p = {0x80, 0x02};
    for (int i = 0; i < 100; ++i) p << std::string("K\x01q\x07" "0");
    p << std::string("h\x07.");
    auto r = run_pickle(p, small);
    REQUIRE(r->root.ok());
    CHECK(r->repr() == "1");
  }
  {
    ptread::Limits shallow;
    shallow.max_stack_depth = 8;
    Bytes p = {0x80, 0x02, '('};
    for (int i = 0; i < 8; ++i) p << std::string("N");
    p << std::string("t.");
    auto r = run_pickle(p, shallow);
    REQUIRE(r->root.ok());  // MARK takes no stack slot: 8 values fit
    p = {0x80, 0x02, '('};
    for (int i = 0; i < 9; ++i) p << std::string("N");
    p << std::string("t.");
    r = run_pickle(p, shallow);
    REQUIRE_FALSE(r->root.ok());
    CHECK(r->root.code() == ptread::ErrorCode::limit_exceeded);
    CHECK(contains(r->root.error().message(), "max_stack_depth"));
  }
  {
    ptread::Limits narrow;
    narrow.max_container_items = 10;
    // 6 + 4 items in two APPENDS: at the limit; one more APPEND goes past it.
    Bytes p = {0x80, 0x02, ']', '(', 'N', 'N', 'N', 'N', 'N', 'N', 'e', '(', 'N', 'N', 'N', 'N', 'e'};
    Bytes ok = p;
    ok.push_back('.');
    auto r = run_pickle(ok, narrow);
    REQUIRE(r->root.ok());
    CHECK(r->graph().at(*r->root).items.size() == 10);
    p << std::string("Na.");
    r = run_pickle(p, narrow);
    REQUIRE_FALSE(r->root.ok());
    CHECK(r->root.code() == ptread::ErrorCode::limit_exceeded);
    CHECK(contains(r->root.error().message(), "max_container_items"));
    CHECK(contains(r->root.error().message(), "APPEND"));
    // A container made at once from the items above a MARK: TUPLE, LIST.
    for (char op : {'t', 'l'}) {
      INFO("opcode " << op);
      Bytes q = {0x80, 0x02, '('};
      for (int i = 0; i < 10; ++i) q << std::string("N");
      q.push_back(static_cast<uint8_t>(op));
      q.push_back('.');
      r = run_pickle(q, narrow);  // 10 items
      REQUIRE(r->root.ok());
      CHECK(r->graph().at(*r->root).items.size() == 10);
      q = {0x80, 0x02, '('};
      for (int i = 0; i < 12; ++i) q << std::string("N");
      q.push_back(static_cast<uint8_t>(op));
      q.push_back('.');
      r = run_pickle(q, narrow);
      REQUIRE_FALSE(r->root.ok());
      CHECK(r->root.code() == ptread::ErrorCode::limit_exceeded);
      CHECK(contains(r->root.error().message(), "max_container_items"));
    }
    // A dict's items are its pairs, however they come: DICT from a MARK, one SETITEMS, or
    // EMPTY_DICT then SETITEMS in two batches. 10 pairs (20 values above the MARK) fit.
    auto dict_pickle = [](int pairs, bool setitems) {
      Bytes q = {0x80, 0x02};
      if (setitems) q.push_back('}');
      q.push_back('(');
      for (int i = 0; i < pairs; ++i) {
        q.push_back('K');
        q.push_back(static_cast<uint8_t>(i));
        q << std::string("N");
      }
      q.push_back(setitems ? 'u' : 'd');
      q.push_back('.');
      return q;
    };
    for (bool setitems : {false, true}) {
      INFO((setitems ? "SETITEMS" : "DICT"));
      r = run_pickle(dict_pickle(10, setitems), narrow);
      REQUIRE(r->root.ok());
      CHECK(r->graph().at(*r->root).kind == ptread::ValueKind::dict);
      CHECK(r->graph().at(*r->root).items.size() == 20);  // keys and values
      r = run_pickle(dict_pickle(11, setitems), narrow);
      REQUIRE_FALSE(r->root.ok());
      CHECK(r->root.code() == ptread::ErrorCode::limit_exceeded);
      CHECK(contains(r->root.error().message(), "max_container_items"));
    }
    Bytes two = {0x80, 0x02, '}', '('};  // 6 pairs, then 4 more, then one more
    for (int i = 0; i < 11; ++i) {
      two.push_back('K');
      two.push_back(static_cast<uint8_t>(i));
      two << std::string("N");
      if (i == 5) two << std::string("u(");
    }
    Bytes ten(two.begin(), two.end() - 3);  // without the last pair
    ten << std::string("u.");
    r = run_pickle(ten, narrow);
    REQUIRE(r->root.ok());
    CHECK(r->graph().at(*r->root).items.size() == 20);
    two << std::string("u.");
    r = run_pickle(two, narrow);
    REQUIRE_FALSE(r->root.ok());
    CHECK(r->root.code() == ptread::ErrorCode::limit_exceeded);
  }
}

TEST_CASE("pickle: 100000 nested lists run without deep recursion", "[pickle]") {
  // ]]]...] (100000 lists) then 99999 APPENDs, each putting a list into the one below it.
  const size_t depth = 100000;
  Bytes p = {0x80, 0x02};
  p.insert(p.end(), depth, static_cast<uint8_t>(']'));
  p.insert(p.end(), depth - 1, static_cast<uint8_t>('a'));
  p.push_back('.');
  auto r = run_pickle(p);
  REQUIRE(r->root.ok());
  CHECK(r->consumed == p.size());
  const ptread::detail::Graph& g = r->graph();
  uint32_t node = *r->root;
  size_t levels = 1;
  while (g.kind(node) == ptread::ValueKind::list && g.at(node).items.size() == 1) {
    node = g.at(node).items[0];
    ++levels;
  }
  CHECK(g.kind(*r->root) == ptread::ValueKind::list);
  CHECK(g.at(*r->root).items.size() == 1);
  CHECK(levels == depth);
  CHECK(g.kind(node) == ptread::ValueKind::list);
  CHECK(g.at(node).items.empty());
  // python_str stops at a fixed depth instead of recursing 100000 times.
  CHECK(ptread::detail::python_str(g, *r->root, true).size() < 200);
}

TEST_CASE("pickle: tuple keys sharing their items are hashed in linear time; comparing such keys has a budget", "[pickle]") {
  // Python's hash of t60 walks its 2^60 leaves (it would not finish). ptread hashes each
  // tuple once, however many keys and dicts share it: a list of a dict {t60: 1, t30: 2}
  // and 1000 dicts {t60: 0} reads (pickles.json's hand/dict_shared_tuple_keys checks the
  // same on t6 against pickle.loads).
  {
    Bytes p = {0x80, 0x02};
    shared_tuples(&p, 60, 0);
    const uint8_t first[] = {']', '(', '}', '(', 'h', 60, 'K', 1, 'h', 30, 'K', 2, 'u'};
    p.insert(p.end(), first, first + sizeof first);
    for (int k = 0; k < 1000; ++k) {
      const uint8_t d[] = {'}', 'h', 60, 'K', 0, 's'};
      p.insert(p.end(), d, d + sizeof d);
    }
    p.push_back('e');
    p.push_back('.');
    auto r = run_pickle(p);
    REQUIRE(r->root.ok());
    const auto& g = r->graph();
    const auto list = g.at(*r->root).items;
    REQUIRE(list.size() == 1001);
    CHECK(g.at(list[0]).items.size() == 4);  // two keys: their hashes differ
    for (size_t k = 1; k < list.size(); ++k) CHECK(g.at(list[k]).items.size() == 2);
  }
  // Two equal keys built apart (t60 and u60, no item in common) must be compared, which
  // takes 2^60 steps (Python's too): limit_exceeded, promptly.
  {
    Bytes p = {0x80, 0x02};
    shared_tuples(&p, 60, 0);
    shared_tuples(&p, 60, 100);
    const uint8_t rest[] = {'}', '(', 'h', 60, 'K', 1, 'h', 160, 'K', 2, 'u', '.'};  // {t60: 1, u60: 2}
    p.insert(p.end(), rest, rest + sizeof rest);
    auto r = run_pickle(p);
    REQUIRE_FALSE(r->root.ok());
    CHECK(r->root.error().code() == ptread::ErrorCode::limit_exceeded);
    CHECK(contains(r->root.error().message(), "keys of a pickle's dicts"));
  }
  // A key nesting tuples deeper than Limits::max_nesting_depth fails at the opcode that
  // sets it: 8 levels read, 9 do not.
  ptread::Limits shallow;
  shallow.max_nesting_depth = 8;
  for (int levels : {8, 9}) {
    Bytes p = {0x80, 0x02, '}', 'K', 1};
    for (int k = 0; k < levels; ++k) p.push_back(0x85);  // TUPLE1
    const uint8_t rest[] = {'K', 2, 's', '.'};
    p.insert(p.end(), rest, rest + sizeof rest);
    auto r = run_pickle(p, shallow);
    INFO(levels << " levels");
    if (levels == 8) {
      REQUIRE(r->root.ok());
      CHECK(r->graph().at(*r->root).items.size() == 2);
    } else {
      REQUIRE_FALSE(r->root.ok());
      CHECK(r->root.error().code() == ptread::ErrorCode::limit_exceeded);
      CHECK(contains(r->root.error().message(), "nests tuples deeper than Limits::max_nesting_depth"));
      CHECK(contains(r->root.error().message(), "SETITEM"));
    }
  }
}

TEST_CASE("pickle: an object given BUILD again and again copies each state's items once", "[pickle]") {
  // Python's BUILD updates the instance's __dict__: C() given {'a': 1} 10,001 times, then
  // {'b': 2}, has {'a': 1, 'b': 2}. Each merge appends to the dict the first one made (it
  // copied all the attributes so far: 10,000 BUILDs took 200 MB and seconds).
  const uint8_t head[] = {0x80, 0x02, 'c', '_', '_', 'm', 'a', 'i', 'n', '_', '_', '\n', 'C', '\n', ')', 0x81};
  auto builds = [&](uint8_t keys, int times) {
    Bytes p(head, head + sizeof head);
    p.push_back('}');
    p.push_back('q');
    p.push_back(0);
    p.push_back('(');
    for (uint8_t k = 0; k < keys; ++k) {
      const uint8_t kv[] = {'X', 2, 0, 0, 0, static_cast<uint8_t>('a' + k / 26), static_cast<uint8_t>('A' + k % 26), 'K', 1};
      p.insert(p.end(), kv, kv + sizeof kv);
    }
    p.push_back('u');
    p.push_back('b');
    for (int k = 0; k < times; ++k) {
      const uint8_t again[] = {'h', 0, 'b'};
      p.insert(p.end(), again, again + sizeof again);
    }
    const uint8_t last[] = {'}', 'X', 1, 0, 0, 0, 'b', 'K', 2, 's', 'b', '.'};
    p.insert(p.end(), last, last + sizeof last);
    return p;
  };
  {
    auto r = run_pickle(builds(1, 10000));
    REQUIRE(r->root.ok());
    const auto& g = r->graph();
    REQUIRE(g.kind(*r->root) == ptread::ValueKind::object);
    const uint32_t state = g.at(*r->root).items[ptread::detail::kObjState];
    REQUIRE(g.kind(state) == ptread::ValueKind::dict);
    const auto items = g.at(state).items;
    REQUIRE(items.size() == 4);
    CHECK(g.text(items[0]) == "aA");
    CHECK(g.at(items[1]).i == 1);
    CHECK(g.text(items[2]) == "b");
    CHECK(g.at(items[3]).i == 2);
  }
  // N BUILDs of an M-key state are N x M updates (in Python too): all the merges of a file
  // append at most 2^22 items. 64 keys (128 items) merged 40,000 times pass it: E502.
  {
    auto r = run_pickle(builds(64, 40000));
    REQUIRE_FALSE(r->root.ok());
    CHECK(r->root.error().code() == ptread::ErrorCode::limit_exceeded);
    CHECK(contains(r->root.error().message(), "BUILD again and again"));
    CHECK(contains(r->root.error().message(), "opcode BUILD"));
  }
}

// A dict key that is an int of over 4300 digits names its tensors by all its digits
// (naming.hpp); the conversion of any size agrees with the bounded one below 4300 digits, on
// both signs, redundant sign bytes and the edges of its base-10^9 groups, and refuses past
// its bound. (pkl_long4_key_5k.pt holds a 12041-digit name to Python's str(), adversarial.)
TEST_CASE("pickle: big ints' decimal digits, of any size within a bound", "[pickle]") {
  using ptread::detail::big_to_decimal;
  using ptread::detail::big_to_decimal_within;
  std::mt19937 rng(53);
  for (int round = 0; round < 2000; ++round) {
    std::string le(1 + rng() % 40, '\0');
    for (char& c : le) c = static_cast<char>(rng() % 4 == 0 ? (rng() % 2 ? 0x00 : 0xff) : rng() % 256);
    std::string digits;
    REQUIRE(big_to_decimal_within(le, 100000, &digits));
    CHECK(digits == big_to_decimal(le));
  }
  const std::pair<std::string, std::string> known[] = {
      {std::string("\x00", 1), "0"},
      {std::string("\xff", 1), "-1"},
      {std::string("\x00\xca\x9a\x3b", 4), "1000000000"},       // 10^9: one group and a zero group
      {std::string("\xff\xc9\x9a\x3b", 4), "999999999"},
      {std::string("\x00\x36\x65\xc4\xff", 5), "-1000000000"},  // -10^9, with a sign byte
      {std::string("\x01\x00\x00\x00\x00\x00", 6), "1"},        // redundant sign bytes
  };
  for (const auto& k : known) {
    std::string digits;
    REQUIRE(big_to_decimal_within(k.first, 100, &digits));
    CHECK(digits == k.second);
  }
  const std::string big(5000, '\x5a');  // 12041 digits
  std::string digits;
  REQUIRE(big_to_decimal_within(big, 12041, &digits));
  CHECK(digits.size() == 12041);
  CHECK(digits.substr(0, 10) == "5591507197");
  CHECK_FALSE(big_to_decimal_within(big, 12040, &digits));
  CHECK(digits.size() == 12041);  // untouched
  CHECK_FALSE(big_to_decimal_within(std::string(30000, '\x5a'), 65536, &digits));
}
