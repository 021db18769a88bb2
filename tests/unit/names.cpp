// The naming walk's budget: a tensor's name joins the keys of every container above it, so a
// key repeated through the memo at every level of a deep nesting makes every name huge
// (an 84 KB file made 5 GB of names in 22 s). The names of a file may take 64 MiB + 256
// bytes a byte of the file, and at most Limits::max_name_bytes; beyond, E502.
#include <catch2/catch.hpp>

#include "support/torch_pickles.hpp"

#include <string>

using namespace ptread_test;

namespace {

// {K: {K: ... {K: {'t0': tensor, 't1': tensor ...}}}}, `depth` dicts under the key K (one
// text, memo 0, gotten at every level), each tensor a view of storage '0'.
Bytes names_nested_pickle(size_t key_bytes, size_t depth, size_t tensors) {
  Pickle p;
  Memo m;
  p.op(0x80).op(2).str(std::string(key_bytes, 'k'));
  m.put(p);  // memo 0
  p.op('0');
  for (size_t d = 0; d < depth; ++d) p.op('}').get(0);
  p.op('}');
  m.put(p);
  p.op('(');
  RunKeys first{};
  for (size_t i = 0; i < tensors; ++i) {
    p.str("t" + std::to_string(i));
    m.put(p);
    const RunKeys k = tensor(p, m, {}, i ? &first : nullptr);
    if (i == 0) first = k;
  }
  p.op('u');
  for (size_t d = 0; d < depth; ++d) p.op('s');
  p.op('.');
  return p.b;
}

}  // namespace

TEST_CASE("names: a key repeated at every level of a deep nesting stops at the names' budget", "[names]") {
  SECTION("2 tensors under 2,000 levels of a 64 KiB key: 2 x 131 MB of names from a 70 KB pickle") {
    const Bytes p = names_nested_pickle(size_t{1} << 16, 2000, 2);
    REQUIRE(p.size() < 80000);
    const std::string out = ptread_test::run_pickle(p, true);
    INFO(out.substr(0, 300));
    CHECK(out.find("[ptread.E502]") == 0);
    CHECK(out.find("names of the tensors and modules would take over") != std::string::npos);
  }
  SECTION("within it: 10 tensors under 100 levels of a 1,000-byte key read, with their whole names") {
    const Bytes p = names_nested_pickle(1000, 100, 10);
    // The pickle run and named as read_zip_checkpoint does, under limits.
    auto named = [&p](ptread::detail::Model& m, const ptread::Limits& limits) {
      ptread::detail::TorchHooks hooks(m, test_storages(), limits);
      ptread::detail::PickleVM vm(m.graph, hooks, limits, "test.pkl");
      auto root = vm.run(p.data(), p.size());
      REQUIRE(root.ok());
      m.root = *root;
      REQUIRE(hooks.finish().ok());
      return ptread::detail::name_tensors(m, limits, p.size());
    };
    ptread::detail::Model m;
    REQUIRE(named(m, ptread::Limits{}).ok());
    REQUIRE(m.named().size() == 10);
    std::string prefix;
    for (int d = 0; d < 100; ++d) prefix += std::string(1000, 'k') + ".";
    CHECK(m.named()[0].name == prefix + "t0");
    CHECK(m.named()[9].name == prefix + "t9");
    // Limits::max_name_bytes bounds them below that: 10 names of 100,102 bytes do not fit in 500,000.
    ptread::Limits small;
    small.max_name_bytes = 500000;
    ptread::detail::Model m2;
    const auto st = named(m2, small);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == ptread::ErrorCode::limit_exceeded);
  }
}
