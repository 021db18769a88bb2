// The allocation helpers under the pickle graph: BlockPool, and the SegmentedVector and
// Arena that take their blocks from one. Blocks must never overlap, must keep what was
// written into them while others are handed out, and small blocks of several containers
// share chunks (which is what makes a pool worth having: see arena.hpp).
#include <catch2/catch.hpp>

#include <ptread/ptread.hpp>

#include "support/platform.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

using ptread::detail::Arena;
using ptread::detail::BlockPool;
using ptread::detail::kHugePage;
using ptread::detail::SegmentedVector;

namespace {

struct Span {
  uintptr_t begin, end;
};

// True when no two of the spans share a byte.
bool disjoint(std::vector<Span> s) {
  std::sort(s.begin(), s.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < s.size(); ++k) {
    if (s[k].begin < s[k - 1].end) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("BlockPool: blocks are aligned, disjoint and keep their bytes", "[arena]") {
  BlockPool pool;
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  std::vector<Span> spans;
  // Sizes from 1 byte to past 2 MiB, in an order that leaves chunks part-used.
  const size_t sizes[] = {1, 17, 4096, 65536, 3, 200000, kHugePage, 70000, kHugePage / 2, kHugePage + 1,
                          5, 1 << 20, 300000, 16, 2 * kHugePage + 100, 48, 999999};
  for (int round = 0; round < 3; ++round) {
    for (size_t n : sizes) {
      auto* p = static_cast<uint8_t*>(pool.allocate(n));
      REQUIRE(p != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0);
      std::memset(p, static_cast<int>(blocks.size() & 0xff), n);
      blocks.emplace_back(p, n);
      spans.push_back({reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + n});
    }
  }
  CHECK(disjoint(spans));
  for (size_t k = 0; k < blocks.size(); ++k) {
    const uint8_t want = static_cast<uint8_t>(k & 0xff);
    const uint8_t* p = blocks[k].first;
    CHECK(std::all_of(p, p + blocks[k].second, [want](uint8_t b) { return b == want; }));
  }
}

TEST_CASE("BlockPool: small blocks share chunks, 2 MiB blocks get their own", "[arena]") {
  if (PTREAD_ASAN) {
    // Under AddressSanitizer each block is allocated on its own, so that a read past one
    // is caught: there is no sharing to see.
    BlockPool pool;
    void* a = pool.allocate(64);
    void* b = pool.allocate(64);
    CHECK(a != b);
    return;
  }
  BlockPool pool;
  auto* a = static_cast<char*>(pool.allocate(1000));
  auto* b = static_cast<char*>(pool.allocate(24));  // 1000 rounds up to 1008
  CHECK(b == a + 1008);
  auto* big = static_cast<char*>(pool.allocate(kHugePage));  // its own chunk: a's continues
  auto* c = static_cast<char*>(pool.allocate(32));
  CHECK(c == b + 32);
  CHECK((big + kHugePage <= a || big >= c + 32));
  // Past the first chunk (64 KiB): a second, of 256 KiB, and cutting goes on there.
  auto* d = static_cast<char*>(pool.allocate(64 << 10));
  auto* e = static_cast<char*>(pool.allocate(16));
  CHECK(e == d + (64 << 10));
  // A block that fits in neither takes a new chunk; the one with more room left is cut next.
  auto* f = static_cast<char*>(pool.allocate(1 << 20));  // a 2 MiB chunk, 1 MiB left in it
  auto* g = static_cast<char*>(pool.allocate(16));
  CHECK(g == f + (1 << 20));
}

TEST_CASE("BlockPool: containers sharing a pool grow together and read back", "[arena]") {
  BlockPool pool;
  SegmentedVector<uint32_t> a(&pool);
  SegmentedVector<uint64_t> b(&pool);
  Arena arena(&pool);
  std::vector<std::pair<const char*, uint32_t>> texts;
  for (uint32_t k = 0; k < 300000; ++k) {
    a.push_back(k * 7u);
    b.push_back(uint64_t{k} << 33 | k);
    if (k % 3 == 0) {
      auto* t = static_cast<char*>(arena.allocate(12, 4));
      std::memcpy(t, &k, 4);
      std::memcpy(t + 4, &k, 4);
      std::memcpy(t + 8, &k, 4);
      texts.emplace_back(t, k);
    }
  }
  bool same = true;
  for (uint32_t k = 0; k < 300000; ++k) same = same && a[k] == k * 7u && b[k] == (uint64_t{k} << 33 | k);
  for (const auto& t : texts) {
    uint32_t v[3];
    std::memcpy(v, t.first, 12);
    same = same && v[0] == t.second && v[1] == t.second && v[2] == t.second;
  }
  CHECK(same);
  // truncate() keeps the pool's blocks for the elements that come after.
  a.truncate(1000);
  for (uint32_t k = 1000; k < 200000; ++k) a.push_back(k + 1);
  same = true;
  for (uint32_t k = 0; k < 200000; ++k) same = same && a[k] == (k < 1000 ? k * 7u : k + 1);
  CHECK(same);
  // A moved vector keeps its pool and its elements.
  SegmentedVector<uint32_t> moved(std::move(a));
  CHECK(moved.size() == 200000);
  CHECK(moved[199999] == 200000);
  moved.push_back(5);
  CHECK(moved[200000] == 5);
}

TEST_CASE("BlockPool: 2 MiB chunks given by another pool are handed out first and outlive the giver", "[arena]") {
  using ptread::detail::BlockPool;
  constexpr size_t kMiB = size_t{1} << 20;
  BlockPool to;
  {
    BlockPool from;
    for (int k = 0; k < 6; ++k) std::memset(from.allocate(kMiB), 0x5a, kMiB);  // three 2 MiB chunks, written
    from.give_chunks(to, 1);
  }  // the giver unmaps the chunks it kept
  auto* b = static_cast<uint8_t*>(to.allocate(kMiB));  // a new 2 MiB chunk: the given one
  std::memset(b + 1, 1, kMiB - 1);  // still mapped, writable
  auto* c = static_cast<uint8_t*>(to.allocate(kMiB));  // the rest of that chunk
  auto* d = static_cast<uint8_t*>(to.allocate(kMiB));  // none given left: memory of its own
  // The bytes the giver wrote (a pool's blocks are written before they are read), where
  // pools cut blocks from chunks. Under AddressSanitizer each block is its own allocation,
  // so no chunk is given: every block is new.
  if (PTREAD_ASAN) {
    CHECK(b[0] != 0x5a);
  } else {
    CHECK(b[0] == 0x5a);
    CHECK(c[0] == 0x5a);
    CHECK(c[kMiB - 1] == 0x5a);
    CHECK(d[0] == 0);  // fresh from the kernel
  }
  CHECK(d[0] != 0x5a);
  CHECK(b[1] == 1);
}

TEST_CASE("PoolVector: grows in its pool's blocks and keeps its values", "[arena]") {
  using ptread::detail::PoolVector;
  BlockPool pool;
  PoolVector<uint32_t> v(&pool);
  CHECK(v.empty());
  v.resize(0, 1);  // nothing to allocate
  CHECK(v.size() == 0);
  for (uint32_t k = 0; k < 100000; ++k) v.push_back(k * 7);  // regrown many times
  REQUIRE(v.size() == 100000);
  bool same = true;
  for (uint32_t k = 0; k < 100000; ++k) same = same && v[k] == k * 7;
  CHECK(same);
  v.resize(100010, 5);
  REQUIRE(v.size() == 100010);
  CHECK(v[99999] == 99999u * 7);
  CHECK((v[100000] == 5 && v[100009] == 5));
  v.resize(3, 9);
  v.resize(6, 8);  // the three after the kept ones are the new value
  const std::vector<uint32_t> six(v.data(), v.data() + v.size());
  CHECK(six == std::vector<uint32_t>{0, 7, 14, 8, 8, 8});
  v.assign(4, 1);
  CHECK(std::vector<uint32_t>(v.data(), v.data() + v.size()) == std::vector<uint32_t>{1, 1, 1, 1});
  // Within a reserve, nothing moves.
  PoolVector<uint8_t> w(&pool);
  w.reserve(5000);
  const uint8_t* at = w.data();
  for (int k = 0; k < 5000; ++k) w.push_back(static_cast<uint8_t>(k));
  CHECK(w.data() == at);
  w.resize(7000, 0xee);  // past it: copied
  CHECK(w.data() != at);
  same = true;
  for (int k = 0; k < 5000; ++k) same = same && w[static_cast<size_t>(k)] == static_cast<uint8_t>(k);
  CHECK(same);
  CHECK(w[6999] == 0xee);
}

TEST_CASE("HugePagePolicy: after a slow first huge-page fault, the next 8 large blocks take small pages", "[arena]") {
  using ptread::detail::HugePagePolicy;
  using std::chrono::microseconds;
  HugePagePolicy::small_blocks_left().store(0);  // whatever blocks mapped before left
  CHECK(HugePagePolicy::want_huge());
  CHECK(HugePagePolicy::huge_now());
  HugePagePolicy::first_fault(microseconds(400));  // 2 MiB cleared at 5 GB/s: keep asking
  CHECK(HugePagePolicy::huge_now());
  CHECK(HugePagePolicy::want_huge());
  HugePagePolicy::first_fault(microseconds(6000));  // cleared at 0.35 GB/s: small pages for a while
  CHECK_FALSE(HugePagePolicy::huge_now());
  for (unsigned k = 0; k < HugePagePolicy::kSmallPageBlocks; ++k) {
    INFO("block " << k);
    CHECK_FALSE(HugePagePolicy::want_huge());
  }
  CHECK(HugePagePolicy::huge_now());
  CHECK(HugePagePolicy::want_huge());  // then huge pages are tried again

  // Blocks mapped either way hold what is written into them.
  for (int slow = 0; slow < 2; ++slow) {
    HugePagePolicy::small_blocks_left().store(slow ? HugePagePolicy::kSmallPageBlocks : 0);
    const size_t n = 2 * kHugePage + 100;
    auto* b = static_cast<uint8_t*>(ptread::detail::block_alloc(n));
    for (size_t i = 0; i < n; i += 4093) b[i] = static_cast<uint8_t>(i * 7 + 1);
    bool same = true;
    for (size_t i = 0; i < n; i += 4093) same = same && b[i] == static_cast<uint8_t>(i * 7 + 1);
    CHECK(same);
    CHECK(b[n - 1] == 0);  // fresh memory, never written (only its first byte was touched)
    ptread::detail::block_free(b, n);
  }
  HugePagePolicy::small_blocks_left().store(0);
}

#if defined(__linux__)
namespace {
// Whether the page at p is in memory (mapped into the page table or in the page cache).
bool resident(const void* p) {
  unsigned char v = 0;
  return ::mincore(const_cast<void*>(p), 4096, &v) == 0 && (v & 1) != 0;
}
// Whether this kernel faults pages in for madvise(MADV_POPULATE_WRITE) (Linux 5.14).
bool populate_offered() {
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = ::madvise(p, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
  ::munmap(p, 4096);
  return ok;
}
}  // namespace

TEST_CASE("ChunkReserve: adjacent 2 MiB chunks, faulted in by another thread without a byte changed", "[arena]") {
  using ptread::detail::ChunkReserve;
  ChunkReserve r;
  REQUIRE(r.map(8));
  // Nothing is faulted in by mapping; fill() without a taker stops `ahead` chunks in.
  auto* first = static_cast<uint8_t*>(r.take(1));
  REQUIRE(first != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(first) % kHugePage == 0);
  CHECK_FALSE(resident(first + kHugePage));
  for (size_t i = 0; i < kHugePage; i += 4096) first[i] = static_cast<uint8_t>(i / 4096 + 1);
  r.fill(2, false);
  const bool offered = populate_offered();
  INFO("MADV_POPULATE_WRITE offered: " << offered);
  // Chunks 1 and 2 (after the taken one) are faulted in where the kernel can; never chunk 3.
  CHECK(resident(first + kHugePage) == offered);
  CHECK(resident(first + 2 * kHugePage + kHugePage - 4096) == offered);
  CHECK_FALSE(resident(first + 3 * kHugePage));

  // A taker writing its chunks while fill() runs beside it, `ahead` chunks ahead.
  r.begin();
  std::thread filler([&r] { r.fill(1, true); });
  auto* two = static_cast<uint8_t*>(r.take(2));  // adjacent, after the first
  REQUIRE(two == first + kHugePage);
  for (size_t i = 0; i < 2 * kHugePage; i += 512) two[i] = static_cast<uint8_t>(i / 512 + 3);
  auto* three = static_cast<uint8_t*>(r.take(3));
  REQUIRE(three == first + 3 * kHugePage);
  for (size_t i = 0; i < 3 * kHugePage; i += 512) three[i] = static_cast<uint8_t>(i / 512 + 5);
  r.end();
  filler.join();
  CHECK(r.take(3) == nullptr);  // two left
  auto* last = static_cast<uint8_t*>(r.take(2));
  CHECK(last == first + 6 * kHugePage);
  CHECK(r.take(1) == nullptr);
  bool same = true;
  for (size_t i = 0; i < kHugePage; i += 4096) same = same && first[i] == static_cast<uint8_t>(i / 4096 + 1);
  for (size_t i = 0; i < 2 * kHugePage; i += 512) same = same && two[i] == static_cast<uint8_t>(i / 512 + 3);
  for (size_t i = 0; i < 3 * kHugePage; i += 512) same = same && three[i] == static_cast<uint8_t>(i / 512 + 5);
  CHECK(same);
  CHECK(three[1] == 0);  // never written: fresh zeros, faulted in or not
  // Taken chunks are the taker's: freed one by one, as a pool frees them.
  ptread::detail::block_free(first, kHugePage);
  ptread::detail::block_free(two, 2 * kHugePage);
  ptread::detail::block_free(three, 3 * kHugePage);
  ptread::detail::block_free(last, 2 * kHugePage);
}

TEST_CASE("ChunkReserve: with the taker's progress known, fill() faults in only what the rest will take", "[arena]") {
  using ptread::detail::ChunkReserve;
  ChunkReserve r;
  REQUIRE(r.map(8));
  r.expect(1000);
  auto* first = static_cast<uint8_t*>(r.take(1));
  REQUIRE(first != nullptr);
  first[0] = 1;
  const bool offered = populate_offered();
  INFO("MADV_POPULATE_WRITE offered: " << offered);
  // Half the work done for one chunk: one more at that rate, and one to spare, of the six
  // asked for.
  r.progress(500);
  r.fill(6, false);
  CHECK(resident(first + kHugePage) == offered);
  CHECK(resident(first + 2 * kHugePage) == offered);
  CHECK_FALSE(resident(first + 3 * kHugePage));
  // Three taken, 99% done: the one to spare only.
  auto* two = static_cast<uint8_t*>(r.take(2));
  REQUIRE(two == first + kHugePage);
  r.progress(990);
  r.fill(6, false);
  CHECK(resident(first + 3 * kHugePage) == offered);
  CHECK_FALSE(resident(first + 4 * kHugePage));
  // All done: still one to spare, no more.
  r.progress(1000);
  r.fill(6, false);
  CHECK_FALSE(resident(first + 4 * kHugePage));
  // The same reserve without a total (expect(0)): `ahead` chunks, as with no progress.
  r.expect(0);
  r.fill(2, false);
  CHECK(resident(first + 4 * kHugePage) == offered);
  CHECK_FALSE(resident(first + 5 * kHugePage));
  CHECK(first[0] == 1);
  ptread::detail::block_free(first, kHugePage);
  ptread::detail::block_free(two, 2 * kHugePage);

  // One chunk taken at 10% of the work and two more at `burst` (of 1000), then fill(6):
  // the first chunk taken (three are the caller's, to free with block_free).
  auto three_taken = [](ChunkReserve& c, size_t burst) {
    c.expect(1000);
    c.progress(100);
    auto* p = static_cast<uint8_t*>(c.take(1));
    c.progress(burst);
    const bool adjacent = p != nullptr && c.take(2) == p + kHugePage;
    c.fill(6, false);
    return adjacent ? p : nullptr;
  };
  // A take past half the work (containers that double take their chunks in bursts: none
  // doubles again before the end): one to spare, where the rate so far (3 chunks for 60%)
  // would have two more and a spare.
  ChunkReserve late;
  REQUIRE(late.map(8));
  uint8_t* one = three_taken(late, 600);
  REQUIRE(one != nullptr);
  CHECK(resident(one + 3 * kHugePage) == offered);
  CHECK_FALSE(resident(one + 4 * kHugePage));
  // Before half the work, the rate so far: 3 chunks for 40%, 4.5 more and a spare: all 5 left.
  ChunkReserve early;
  REQUIRE(early.map(8));
  uint8_t* e1 = three_taken(early, 400);
  REQUIRE(e1 != nullptr);
  CHECK(resident(e1 + 3 * kHugePage) == offered);
  CHECK(resident(e1 + 7 * kHugePage) == offered);
  ptread::detail::block_free(one, 3 * kHugePage);
  ptread::detail::block_free(e1, 3 * kHugePage);
}

TEST_CASE("ChunkReserve: once huge pages were slow anywhere, the chunks it faults in next take small pages", "[arena]") {
  using ptread::detail::ChunkReserve;
  using ptread::detail::HugePagePolicy;
  HugePagePolicy::small_blocks_left().store(0);
  ChunkReserve r;
  REQUIRE(r.map(4));
  auto* first = static_cast<uint8_t*>(r.take(1));
  REQUIRE(first != nullptr);
  first[0] = 1;
  const std::string mapped = ptread_test::vm_flags(first + kHugePage);
  INFO("the chunks after the taken one, as mapped: VmFlags" << mapped);
  // Mapped while huge pages were fast: advised huge pages (where the kernel has them).
  const bool advised = mapped.find(" hg ") != std::string::npos;
  CHECK((advised || ::madvise(first, kHugePage, MADV_HUGEPAGE) != 0));
  // A pool's own block found them slow: the reserve's next fill takes small pages for the
  // rest (it once went on faulting in huge pages, a few ms each where they are slow).
  HugePagePolicy::first_fault(std::chrono::microseconds(6000));
  r.fill(1, false);
  if (advised) {
    const std::string after = ptread_test::vm_flags(first + kHugePage);
    INFO("after the fill: VmFlags" << after);
    CHECK(after.find(" nh ") != std::string::npos);
    CHECK(ptread_test::vm_flags(first + 3 * kHugePage).find(" nh ") != std::string::npos);
  }
  CHECK(first[0] == 1);
  // Mapped while small pages are preferred: advised small pages from the start.
  ChunkReserve small;
  REQUIRE(small.map(2));
  auto* one = static_cast<uint8_t*>(small.take(1));
  REQUIRE(one != nullptr);
  if (advised) CHECK(ptread_test::vm_flags(one).find(" nh ") != std::string::npos);
  HugePagePolicy::small_blocks_left().store(0);
  ptread::detail::block_free(first, kHugePage);
  ptread::detail::block_free(one, kHugePage);
}

TEST_CASE("ChunkReserve: a pool takes its 2 MiB chunks from it while set, then maps its own", "[arena]") {
  using ptread::detail::ChunkReserve;
  ChunkReserve r;
  REQUIRE(r.map(3));
  auto* probe = static_cast<char*>(r.take(1));  // the reserve's first chunk: the rest follow it
  REQUIRE(probe != nullptr);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(probe) + kHugePage, hi = lo + 2 * kHugePage;
  auto inside = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) >= lo && reinterpret_cast<uintptr_t>(p) < hi; };
  std::vector<std::pair<char*, size_t>> blocks;
  {
    BlockPool pool;
    pool.set_reserve(&r);
    // Blocks of 2 MiB are chunks of their own (with or without AddressSanitizer, which
    // gives every block its own): the first two come from the reserve.
    size_t from_reserve = 0;
    for (int k = 0; k < 4; ++k) {
      const size_t n = k == 1 ? 1000 : kHugePage;
      auto* b = static_cast<char*>(pool.allocate(n));
      std::memset(b, k + 1, n);
      blocks.push_back({b, n});
      from_reserve += inside(b);
      if (n == kHugePage) CHECK(inside(b) == (k < 3));
    }
    auto* big = static_cast<char*>(pool.allocate(3 * kHugePage));  // two chunks are not left: its own
    CHECK_FALSE(inside(big));
    std::memset(big, 0x5a, 3 * kHugePage);
    pool.set_reserve(nullptr);
    CHECK(from_reserve == 2);
    CHECK(r.take(1) == nullptr);  // the pool took both
    bool same = true;
    for (size_t k = 0; k < blocks.size(); ++k) {
      for (size_t i = 0; i < blocks[k].second; i += 997) same = same && blocks[k].first[i] == static_cast<char>(k + 1);
    }
    CHECK(same);
    CHECK(disjoint([&] {
      std::vector<Span> s;
      for (const auto& b : blocks) s.push_back({reinterpret_cast<uintptr_t>(b.first), reinterpret_cast<uintptr_t>(b.first) + b.second});
      s.push_back({reinterpret_cast<uintptr_t>(big), reinterpret_cast<uintptr_t>(big) + 3 * kHugePage});
      return s;
    }()));
  }  // the pool frees its chunks, the reserve's among them
  ptread::detail::block_free(probe, kHugePage);
}
TEST_CASE("ChunkReserve: chunks taken before begin() are faulted in by fill() first, later takes are the taker's", "[arena]") {
  // read_zip_overlapped takes the storage tables', the graph's and the memo's first chunks
  // before the walking thread starts: they are written from the pickle's first bytes.
  using ptread::detail::ChunkReserve;
  ChunkReserve r;
  REQUIRE(r.map(6));
  auto* early = static_cast<uint8_t*>(r.take(1));  // before begin()
  REQUIRE(early != nullptr);
  r.begin();
  auto* later = static_cast<uint8_t*>(r.take(1));  // after: the taker faults it in itself
  REQUIRE(later == early + kHugePage);
  CHECK_FALSE(resident(early + kHugePage - 4096));
  r.fill(1, false);
  const bool offered = populate_offered();
  INFO("MADV_POPULATE_WRITE offered: " << offered);
  CHECK(resident(early + kHugePage - 4096) == offered);  // taken, and faulted in
  CHECK_FALSE(resident(later + kHugePage - 4096));       // skipped
  CHECK(resident(later + 2 * kHugePage - 4096) == offered);  // the one ahead
  CHECK_FALSE(resident(early + 3 * kHugePage));
  r.end();
  for (size_t i = 0; i < kHugePage; i += 4096) CHECK(early[i] == 0);
  early[5] = 9;
  later[5] = 8;
  CHECK(early[5] == 9);
  CHECK(later[5] == 8);
  ptread::detail::block_free(early, kHugePage);
  ptread::detail::block_free(later, kHugePage);
}

TEST_CASE("BlockPool: prime() makes the reserve's next chunk the block its allocations are cut from", "[arena]") {
  using ptread::detail::ChunkReserve;
  ChunkReserve r;
  REQUIRE(r.map(2));
  {
    BlockPool pool;
    pool.set_reserve(&r);
    pool.prime();
    auto* a = static_cast<char*>(pool.allocate(1000));
    auto* b = static_cast<char*>(pool.allocate(70000));  // past the 64 KiB block an unprimed pool starts with
    std::memset(a, 1, 1000);
    std::memset(b, 2, 70000);
    auto* next = static_cast<char*>(r.take(1));
    if (PTREAD_ASAN) {  // (every block its own: prime() takes nothing)
      CHECK(next != nullptr);
    } else {
      REQUIRE(next != nullptr);
      const uintptr_t lo = reinterpret_cast<uintptr_t>(next) - kHugePage, hi = reinterpret_cast<uintptr_t>(next);
      CHECK(reinterpret_cast<uintptr_t>(a) == lo);
      CHECK(reinterpret_cast<uintptr_t>(b) >= lo + 1000);
      CHECK(reinterpret_cast<uintptr_t>(b) + 70000 <= hi);
    }
    // The reserve spent: prime() takes nothing, the pool maps its own.
    pool.prime();
    auto* c = static_cast<char*>(pool.allocate(3 * kHugePage));
    std::memset(c, 3, 3 * kHugePage);
    CHECK((a[999] == 1 && b[0] == 2 && b[69999] == 2 && c[0] == 3));
    pool.set_reserve(nullptr);
    if (next != nullptr) ptread::detail::block_free(next, kHugePage);
  }
  BlockPool bare;  // no reserve: prime() does nothing
  bare.prime();
  auto* d = static_cast<char*>(bare.allocate(100));
  std::memset(d, 4, 100);
  CHECK(d[99] == 4);
}

#endif
