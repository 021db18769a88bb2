// ptread — allocation helpers for the pickle graph: a bump arena, a segmented vector, the
// block pool they can share, and a reserve of 2 MiB chunks another thread faults in ahead
// of a pool's use (ChunkReserve).
//
// Both hand out memory that never moves while they grow, so references into them stay
// valid, and both make O(log n) allocations for n elements (blocks double in size).
// Blocks of 2 MiB and more are mapped directly and, where the system offers it, asked
// for transparent huge pages: a large checkpoint's graph then costs one page fault per
// 2 MiB instead of 512.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if PTREAD_POSIX
#include <sys/mman.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PTREAD_ALWAYS_INLINE inline __attribute__((always_inline))
#define PTREAD_NOINLINE __attribute__((noinline))
#define PTREAD_LIKELY(x) __builtin_expect(!!(x), 1)
#define PTREAD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define PTREAD_ALWAYS_INLINE inline
#define PTREAD_NOINLINE
#define PTREAD_LIKELY(x) (x)
#define PTREAD_UNLIKELY(x) (x)
#endif

namespace ptread {
namespace detail {

// What std containers do when memory runs out: throw std::bad_alloc, or abort without
// exceptions.
[[noreturn]] inline void out_of_memory() {
#if PTREAD_EXCEPTIONS
  throw std::bad_alloc();
#else
  std::abort();
#endif
}

inline constexpr size_t kHugePage = size_t{1} << 21;

// Built with AddressSanitizer (which then sees each block on its own).
#if defined(__SANITIZE_ADDRESS__)
#define PTREAD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PTREAD_ASAN 1
#endif
#endif
#ifndef PTREAD_ASAN
#define PTREAD_ASAN 0
#endif

// Whether the next large block asks for huge pages. One fault per 2 MiB instead of 512 is
// the faster way where huge pages are cleared at memory speed. On VMs whose host takes freed
// memory back (virtio-balloon free page reporting), a huge page the guest takes from such
// memory is cleared at a tenth of that speed or less (bench/README.md, "Cold memory"), while
// small pages come from memory the guest kept. So each huge block's first fault is timed
// (the block is touched as it is mapped): after one over kSlowHugeFault, the next
// kSmallPageBlocks blocks take small pages, then one tries huge pages again. A timing that
// noise makes wrong costs speed, never correctness.
struct HugePagePolicy {
  static constexpr std::chrono::microseconds kSlowHugeFault{1500};  // 2 MiB cleared at under 1.4 GB/s
  static constexpr unsigned kSmallPageBlocks = 8;
  static std::atomic<unsigned>& small_blocks_left() noexcept {
    static std::atomic<unsigned> left{0};
    return left;
  }
  // For a block about to be mapped: true to ask for huge pages.
  static bool want_huge() noexcept {
    auto& left = small_blocks_left();
    unsigned v = left.load(std::memory_order_relaxed);
    while (v != 0 && !left.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
    }
    return v == 0;
  }
  // After a huge-page block's first fault took `took`.
  static void first_fault(std::chrono::steady_clock::duration took) noexcept {
    if (took > kSlowHugeFault) small_blocks_left().store(kSmallPageBlocks, std::memory_order_relaxed);
  }
  // Whether vectors reserved now ask for huge pages (advise_huge): not while small pages
  // are preferred.
  static bool huge_now() noexcept { return small_blocks_left().load(std::memory_order_relaxed) == 0; }
};

#if PTREAD_POSIX && defined(MADV_HUGEPAGE)
// len bytes (a multiple of 2 MiB) of fresh anonymous memory at a 2 MiB boundary (huge pages
// need aligned ranges), or 0 when the system has none to map.
inline uintptr_t map_aligned(size_t len, int flags) noexcept {
  void* p = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (p == MAP_FAILED) return 0;
  // Keep the aligned middle.
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  const uintptr_t end = start + len + kHugePage;
  if (aligned > start) ::munmap(p, aligned - start);
  if (end > aligned + len) ::munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  return aligned;
}
#endif

// n bytes (n > 0) for a block, aligned to 16; never null.
inline void* block_alloc(size_t n) {
#if PTREAD_POSIX && defined(MADV_HUGEPAGE)
  if (n >= kHugePage) {
    const size_t len = (n + kHugePage - 1) & ~(kHugePage - 1);
    const uintptr_t aligned = map_aligned(len, 0);
    if (aligned != 0) {
      if (HugePagePolicy::want_huge()) {
        ::madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);  // a hint: failure is fine
        const auto t0 = std::chrono::steady_clock::now();
        *reinterpret_cast<volatile char*>(aligned) = 0;  // the first fault, timed
        HugePagePolicy::first_fault(std::chrono::steady_clock::now() - t0);
      }
      return reinterpret_cast<void*>(aligned);
    }
    out_of_memory();
  }
#endif
  void* p = std::malloc(n);
  if (p == nullptr) out_of_memory();
  return p;
}

// Frees a block_alloc(n) block.
inline void block_free(void* p, size_t n) noexcept {
#if PTREAD_POSIX && defined(MADV_HUGEPAGE)
  if (n >= kHugePage) {
    ::munmap(p, (n + kHugePage - 1) & ~(kHugePage - 1));
    return;
  }
#endif
  (void)n;
  std::free(p);
}

// Maps the pages of [p, p + n), part of a read-only file mapping whose bytes another
// thread is about to read, into the page table, so that its reads take no page fault
// (Linux 5.14: MADV_POPULATE_READ; elsewhere nothing). Reads nothing itself: a file cut
// short since it was mapped makes madvise fail, not a SIGBUS.
inline void populate_read(const void* p, size_t n) noexcept {
#if PTREAD_POSIX && defined(__linux__)
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // Linux's value; older headers lack it
#endif
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  if (n != 0) ::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ);  // a hint: failure is fine
#else
  (void)p;
  (void)n;
#endif
}

// The whole 2 MiB pages inside [p, p + n), as [first, last) addresses (first == last: none).
inline std::pair<uintptr_t, uintptr_t> whole_huge_pages(const void* p, size_t n) noexcept {
  constexpr uintptr_t kHuge = kHugePage;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (n < kHuge || a > UINTPTR_MAX - n) return {0, 0};
  const uintptr_t first = (a + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (a + n) & ~(kHuge - 1);
  return first < last ? std::pair<uintptr_t, uintptr_t>{first, last} : std::pair<uintptr_t, uintptr_t>{0, 0};
}

// Asks for transparent huge pages on the whole 2 MiB pages inside [p, p + n), memory not
// touched yet (a vector just reserved): a hint, nothing happens where it is not offered.
inline void advise_huge(const void* p, size_t n) noexcept {
#if PTREAD_POSIX && defined(MADV_HUGEPAGE)
  const auto range = whole_huge_pages(p, n);
  if (range.first != range.second && HugePagePolicy::huge_now()) {
    ::madvise(reinterpret_cast<void*>(range.first), range.second - range.first, MADV_HUGEPAGE);
  }
#else
  (void)p;
  (void)n;
#endif
}

// v.reserve(n), the new memory hinted for huge pages when it is large.
template <class V>
void reserve_huge(V& v, size_t n) {
  if (n <= v.capacity()) return;
  v.reserve(n);
  if (v.capacity() * sizeof(*v.data()) >= 2 * kHugePage) advise_huge(v.data(), v.capacity() * sizeof(*v.data()));
}

// Chunks of 2 MiB for BlockPools, faulted in by another thread ahead of their use. The
// kernel clears each page a process touches for the first time: reading a checkpoint of
// 100,000 small tensors takes about 30 MB of fresh memory, and clearing it was 13-15% of
// the profile of `ptread ls`, on the thread reading the pickle, while the thread beside it
// (walking the zip directory) was idle three quarters of the time. That thread calls fill():
// MADV_POPULATE_WRITE (Linux 5.14) faults a chunk in without writing to it, so a chunk the
// pickle's thread has taken (and may be writing) is never changed by it. Where it is not
// offered (older kernels, other systems) nothing is filled and the pools fault their
// chunks in themselves, as without a reserve. (bench/README.md, "Fresh memory faulted in
// beside the pickle": about 5% off `ptread ls` of 100,000 tensors.)
// Lifetime: a taken chunk belongs to the pool that took it (block_free unmaps it); the
// reserve unmaps the chunks not taken. No pool that took chunks may free them while
// fill() runs (fill reads no chunk, but would fault in whatever was mapped there next).
class ChunkReserve {
 public:
  ChunkReserve() = default;
  ChunkReserve(const ChunkReserve&) = delete;
  ChunkReserve& operator=(const ChunkReserve&) = delete;
  ~ChunkReserve() {
#if PTREAD_POSIX
    const size_t taken = taken_.load(std::memory_order_relaxed);
    if (base_ != nullptr && taken < count_) ::munmap(base_ + taken * kHugePage, (count_ - taken) * kHugePage);
#endif
  }

  // Maps `chunks` chunks (address space only: nothing is faulted in). False where fill()
  // cannot work; the reserve then hands out nothing.
  bool map(size_t chunks) noexcept {
#if PTREAD_POSIX && defined(__linux__) && defined(MADV_HUGEPAGE)
    if (chunks == 0 || base_ != nullptr || chunks > (size_t{1} << 40) / kHugePage) return false;
    const size_t len = chunks * kHugePage;
    const uintptr_t aligned = map_aligned(len, MAP_NORESERVE);  // address space, not memory committed to
    if (aligned == 0) return false;
    small_ = !HugePagePolicy::huge_now();
    ::madvise(reinterpret_cast<void*>(aligned), len, small_ ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);  // a hint
    base_ = reinterpret_cast<char*>(aligned);
    count_ = chunks;
    return true;
#else
    (void)chunks;
    return false;
#endif
  }

  // n adjacent chunks (n * kHugePage bytes, 2 MiB aligned), now the caller's (free them
  // with block_free(p, n * kHugePage)); nullptr when fewer are left.
  void* take(size_t n) noexcept {
    if (base_ == nullptr || n == 0 || n > count_) return nullptr;
    size_t k = taken_.load(std::memory_order_relaxed);
    do {
      if (k > count_ - n) return nullptr;
    } while (!taken_.compare_exchange_weak(k, k + n, std::memory_order_relaxed));
    if (!taking_.load(std::memory_order_relaxed)) early_.store(k + n, std::memory_order_relaxed);  // before begin()
    last_take_.store(done_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return base_ + k * kHugePage;
  }

  // The taking thread: begin() before its first take() of the work, end() after its last;
  // fill() waits for takes only in between. Chunks taken before the thread that fills
  // starts and before begin() (memory the work will write from its start, sized before it)
  // are faulted in by fill() first, though taken.
  void begin() noexcept { taking_.store(true, std::memory_order_release); }
  void end() noexcept { ended_.store(true, std::memory_order_release); }

  // The taking thread's progress through its work: `total` units (set before fill() runs),
  // `done` of them done (from the taking thread, now and then). Once some is done, fill()
  // keeps no more chunks ahead than the rest will take at the rate taken so far (plus one):
  // near the end it stops faulting in chunks that would never be taken. Pools whose
  // containers double take their chunks in bursts (every container of 100,000 tensors
  // starts a larger block when 65,280 are read), which the rate so far overestimates: after
  // a take past half the work, no container doubles again before the end, so one chunk
  // ahead is kept, no more (the rate had 2-4 chunks cleared and never taken).
  void expect(size_t total) noexcept { total_ = total; }
  void progress(size_t done) noexcept { done_.store(done, std::memory_order_relaxed); }

  // From one thread at a time, not the taking one: faults in the chunks after the ones
  // taken, keeping at most `ahead` faulted in and not taken. Returns when all are faulted
  // in or taken, after end(), when faulting in fails, or (without `wait`, or while the
  // taking thread has not begun) when `ahead` are ready.
  void fill(size_t ahead, bool wait) noexcept {
#if PTREAD_POSIX && defined(__linux__) && defined(MADV_HUGEPAGE)
#ifndef MADV_POPULATE_WRITE
    constexpr int MADV_POPULATE_WRITE = 23;  // Linux's value; older headers lack it
#endif
    while (base_ != nullptr && !failed_ && !ended_.load(std::memory_order_acquire)) {
      const size_t taken = taken_.load(std::memory_order_relaxed);
      if (filled_ < taken && filled_ >= early_.load(std::memory_order_relaxed)) filled_ = taken;  // those the taker faulted in itself
      if (filled_ >= count_) return;
      if (filled_ >= taken + std::min(ahead, still_needed(taken))) {
        if (!wait || !taking_.load(std::memory_order_acquire)) return;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        continue;
      }
      // Huge pages found slow elsewhere (a pool's own block, another reserve): the rest in
      // small pages, as if this fill had found them slow.
      if (!small_ && !HugePagePolicy::huge_now()) small_from_filled();
      char* chunk = base_ + filled_ * kHugePage;
      const auto t0 = std::chrono::steady_clock::now();
      if (::madvise(chunk, kHugePage, MADV_POPULATE_WRITE) != 0) {
        failed_ = true;  // not offered (EINVAL before Linux 5.14), or no memory: the taker faults them in
        return;
      }
      const auto took = std::chrono::steady_clock::now() - t0;
      ++filled_;
      if (took > HugePagePolicy::kSlowHugeFault && HugePagePolicy::huge_now()) {
        // Huge pages cleared slowly (see HugePagePolicy): the rest in small pages.
        HugePagePolicy::first_fault(took);
        small_from_filled();
      }
    }
#else
    (void)ahead;
    (void)wait;
#endif
  }

 private:
#if PTREAD_POSIX && defined(__linux__) && defined(MADV_HUGEPAGE)
  // fill()'s: the chunks not faulted in yet advised small pages from now on.
  void small_from_filled() noexcept {
    small_ = true;
    if (filled_ < count_) ::madvise(base_ + filled_ * kHugePage, (count_ - filled_) * kHugePage, MADV_NOHUGEPAGE);
  }
#endif
  // The chunks the rest of the work will take at the rate so far, plus one (before a
  // rate is known, nothing taken or nothing done: all); one after a take past half the work.
  size_t still_needed(size_t taken) const noexcept {
    const size_t done = done_.load(std::memory_order_relaxed);
    if (total_ == 0 || done == 0 || taken == 0) return count_;
    if (done >= total_ || last_take_.load(std::memory_order_relaxed) > total_ / 2) return 1;
    const double rest = static_cast<double>(taken) * static_cast<double>(total_ - done) / static_cast<double>(done);
    return rest < static_cast<double>(count_) ? static_cast<size_t>(rest) + 1 : count_;
  }

  char* base_ = nullptr;
  size_t count_ = 0;
  size_t total_ = 0;                  // expect()
  std::atomic<size_t> done_{0};       // progress()
  std::atomic<size_t> last_take_{0};  // done_ at the latest take()
  std::atomic<size_t> taken_{0};
  size_t filled_ = 0;  // fill()'s: chunks [0, filled_) are faulted in or taken
  std::atomic<size_t> early_{0};  // chunks [0, early_) were taken before begin()
  bool failed_ = false;
  bool small_ = false;  // fill()'s: the chunks from filled_ on are advised small pages
  std::atomic<bool> taking_{false}, ended_{false};
};

// memcpy for the short copies of the pickle graph (keys, names, small tuples), inline.
PTREAD_ALWAYS_INLINE void copy_bytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n >= 8 && n <= 16) {
    uint64_t a, b;
    std::memcpy(&a, s, 8);
    std::memcpy(&b, s + n - 8, 8);
    std::memcpy(d, &a, 8);
    std::memcpy(d + n - 8, &b, 8);
  } else if (n >= 4 && n < 8) {
    uint32_t a, b;
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + n - 4, 4);
    std::memcpy(d, &a, 4);
    std::memcpy(d + n - 4, &b, 4);
  } else if (n < 4) {
    for (size_t k = 0; k < n; ++k) d[k] = s[k];
  } else {
    std::memcpy(d, s, n);
  }
}

// Blocks for containers that die together (a checkpoint's graph; what reading a pickle
// needs): small blocks are cut from shared chunks, and after the first 320 KiB the chunks
// are 2 MiB, backed by huge pages where the system offers them. Each container's blocks
// double in size, so ten containers growing to 100,000 elements would otherwise each map
// a run of blocks under 2 MiB, page by page (a page fault per 4 KiB). Nothing is freed
// before the pool is destroyed; it must outlive the containers using it.
class BlockPool {
 public:
  BlockPool() = default;
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;
  ~BlockPool() {
    for (const Chunk& c : chunks_) block_free(c.p, c.n);
    for (char* c : spare_) block_free(c, kHugePage);
  }

  // Where its 2 MiB chunks come from while the reserve has some (nullptr: none). The
  // reserve must outlive the pool's use of it; the chunks are the pool's.
  void set_reserve(ChunkReserve* r) noexcept { reserve_ = r; }

  // With a reserve that has a chunk left: takes it now as the block the next allocations
  // are cut from, and 2 MiB chunks from then on (no blocks of 64 and 256 KiB first: 80
  // fresh pages of 4 KiB, each faulted in by the thread that writes it). Called before
  // the reserve's filling thread starts, that thread faults the chunk in first
  // (ChunkReserve::begin).
  void prime() {
    if (reserve_ == nullptr || PTREAD_ASAN) return;
    chunks_.reserve(chunks_.size() + 1);  // before taking: no leak if this fails
    void* r = reserve_->take(1);
    if (r == nullptr) return;
    chunks_.push_back({static_cast<char*>(r), kHugePage});
    cur_ = static_cast<char*>(r);
    left_ = kHugePage;
    next_ = kHugePage;
  }

  // Moves up to `max` of its 2 MiB chunks to `to`, which hands them out before any other
  // (their bytes are what they held: a pool's memory is written before it is read). For a
  // pool whose containers are done with: the pickle VM's, once the pickle is read, gives
  // the model's pool the chunks its names take next, memory already faulted in instead of
  // fresh (on the thread that names, where a fresh chunk cost 0.2-8 ms). This pool
  // allocates nothing after; `to` owns the chunks.
  void give_chunks(BlockPool& to, size_t max) {
    to.spare_.reserve(to.spare_.size() + max);  // before anything moves: no leak if this fails
    for (size_t k = chunks_.size(); k-- > 0 && max > 0;) {
      if (chunks_[k].n != kHugePage) continue;
      to.spare_.push_back(chunks_[k].p);
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(k));
      --max;
    }
    cur_ = nullptr;
    left_ = 0;
  }

  // n bytes (n > 0), aligned to 16; never null.
  void* allocate(size_t n) {
    n = (n + 15) & ~size_t{15};
    if (PTREAD_ASAN) return new_chunk(n);  // each block on its own: the sanitizer sees reads past its end
    if (n <= left_) {
      char* p = cur_;
      cur_ += n;
      left_ -= n;
      return p;
    }
    if (n >= kHugePage) return new_chunk((n + kHugePage - 1) & ~(kHugePage - 1));  // its own, the current one stays
    const size_t size = n <= next_ ? next_ : kHugePage;
    char* c = new_chunk(size);
    next_ = next_ < kHugePage / 8 ? next_ * 4 : kHugePage;
    if (size - n > left_) {  // cut the next blocks from whichever chunk has more room
      cur_ = c + n;
      left_ = size - n;
    }
    return c;
  }

 private:
  struct Chunk {
    char* p;
    size_t n;
  };
  char* new_chunk(size_t n) {
    chunks_.reserve(chunks_.size() + 1);  // before allocating: no leak if this fails
    if (n == kHugePage && !spare_.empty()) {
      char* c = spare_.back();
      spare_.pop_back();
      chunks_.push_back({c, n});
      return c;
    }
    void* r = reserve_ != nullptr && n % kHugePage == 0 ? reserve_->take(n / kHugePage) : nullptr;
    char* c = static_cast<char*>(r != nullptr ? r : block_alloc(n));
    chunks_.push_back({c, n});
    return c;
  }

  std::vector<Chunk> chunks_;
  std::vector<char*> spare_;  // 2 MiB chunks given by another pool, not handed out yet
  ChunkReserve* reserve_ = nullptr;  // set_reserve
  char* cur_ = nullptr;
  size_t left_ = 0;
  size_t next_ = size_t{64} << 10;  // 64 KiB, 256 KiB, then 2 MiB
};

// A vector of plain values in a BlockPool's memory, which the pool frees: for arrays that
// should live in chunks faulted in by another thread (ChunkReserve) or already faulted in
// (BlockPool::give_chunks) rather than in fresh pages of their own. On the VM measured
// (bench/README.md, "Shadowed page tables") a fresh 4 KiB page costs the thread that first
// writes it 15-24 us; an array of 100,000 uint32_t is 100 such pages. Growing past the
// capacity copies into a new block and leaves the old one to the pool (at most as much
// again): reserve() what is known.
template <class T>
class PoolVector {
  static_assert(std::is_trivially_copyable<T>::value && std::is_trivially_destructible<T>::value,
                "PoolVector holds plain values");

 public:
  explicit PoolVector(BlockPool* pool) noexcept : pool_(pool) {}
  PoolVector(const PoolVector&) = delete;
  PoolVector& operator=(const PoolVector&) = delete;

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  PTREAD_ALWAYS_INLINE T& operator[](size_t i) noexcept { return data_[i]; }
  PTREAD_ALWAYS_INLINE const T& operator[](size_t i) const noexcept { return data_[i]; }

  void reserve(size_t n) {
    if (n > cap_) regrow(n);
  }
  // n elements: the first min(n, size()) kept, the others v.
  void resize(size_t n, const T& v) {
    if (n > cap_) regrow(n);
    for (size_t k = size_; k < n; ++k) data_[k] = v;
    size_ = n;
  }
  void assign(size_t n, const T& v) {
    size_ = 0;
    resize(n, v);
  }
  PTREAD_ALWAYS_INLINE void push_back(const T& v) {
    if (PTREAD_UNLIKELY(size_ == cap_)) regrow(cap_ < 8 ? 16 : 2 * cap_);
    data_[size_++] = v;
  }

 private:
  PTREAD_NOINLINE void regrow(size_t n) {
    if (n > (SIZE_MAX >> 1) / sizeof(T)) out_of_memory();
    T* d = static_cast<T*>(pool_->allocate(n * sizeof(T)));
    if (size_ != 0) std::memcpy(static_cast<void*>(d), data_, size_ * sizeof(T));
    data_ = d;
    cap_ = n;
  }

  BlockPool* pool_;
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = 0;
};

// Index of the highest set bit of v (v != 0).
PTREAD_ALWAYS_INLINE unsigned high_bit(uint64_t v) noexcept { return 63u - static_cast<unsigned>(__builtin_clzll(v)); }

// Raw memory in growing blocks (4 KiB doubling to kMaxBlock); nothing is freed before the
// arena is destroyed. The blocks stop growing at 1 MiB because a pool's chunks are faulted
// in whole before they are taken (ChunkReserve): a last block of 4 MiB, a tenth written,
// cost as much as a full one (`ptread ls` of 100,000 tensors: 13 chunks taken, 12 with
// blocks of at most 1 MiB).
class Arena {
 public:
  Arena() = default;
  explicit Arena(BlockPool* pool) noexcept : pool_(pool) {}  // its blocks from pool
  Arena(Arena&& o) noexcept
      : blocks_(std::move(o.blocks_)), pool_(o.pool_), cur_(o.cur_), left_(o.left_), next_(o.next_) {
    o.blocks_.clear();
    o.cur_ = nullptr;
    o.left_ = 0;
  }
  Arena& operator=(Arena&& o) noexcept {
    if (this != &o) {
      release();
      blocks_ = std::move(o.blocks_);
      pool_ = o.pool_;
      cur_ = o.cur_;
      left_ = o.left_;
      next_ = o.next_;
      o.blocks_.clear();
      o.cur_ = nullptr;
      o.left_ = 0;
    }
    return *this;
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() { release(); }

  // n bytes aligned to `align` (a power of two <= 16).
  PTREAD_ALWAYS_INLINE void* allocate(size_t n, size_t align) {
    const size_t pad = (align - (reinterpret_cast<uintptr_t>(cur_) & (align - 1))) & (align - 1);
    if (PTREAD_LIKELY(n + pad <= left_)) {
      char* p = cur_ + pad;
      cur_ = p + n;
      left_ -= n + pad;
      return p;
    }
    return allocate_slow(n);
  }

  // A copy of [p, p + n) that lives as long as the arena.
  PTREAD_ALWAYS_INLINE const char* copy(const char* p, size_t n) {
    if (n == 0) return "";
    char* d = static_cast<char*>(allocate(n, 1));
    copy_bytes(d, p, n);
    return d;
  }

 private:
  struct Block {
    char* p;
    size_t n;
  };

  PTREAD_NOINLINE void* allocate_slow(size_t n) {
    if (n > next_ / 4) return new_block(n);  // large: a block of its own, the current one stays
    char* b = new_block(next_);
    cur_ = b + n;  // blocks are 16-aligned
    left_ = next_ - n;
    if (next_ < kMaxBlock) next_ *= 2;
    return b;
  }
  char* new_block(size_t n) {
    if (pool_ != nullptr) return static_cast<char*>(pool_->allocate(n == 0 ? 1 : n));
    blocks_.reserve(blocks_.size() + 1);  // before allocating: no leak if this fails
    char* b = static_cast<char*>(block_alloc(n == 0 ? 1 : n));
    blocks_.push_back({b, n == 0 ? 1 : n});
    return b;
  }
  void release() noexcept {
    for (const Block& b : blocks_) block_free(b.p, b.n);
    blocks_.clear();
  }

  static constexpr size_t kMaxBlock = size_t{1} << 20;
  std::vector<Block> blocks_;  // without a pool
  BlockPool* pool_ = nullptr;
  char* cur_ = nullptr;
  size_t left_ = 0;
  size_t next_ = 4096;
};

// A stack of uint32_t with an inline push (the pickle VM's value stack), holding at most
// limit() values: a push beyond fails, checked by the same comparison as the room left.
class U32Stack {
 public:
  U32Stack() = default;
  U32Stack(const U32Stack&) = delete;
  U32Stack& operator=(const U32Stack&) = delete;
  ~U32Stack() { std::free(data_); }

  void set_limit(size_t max) noexcept {
    max_ = max;
    end_ = data_ + (cap_ < max_ ? cap_ : max_);
  }
  size_t size() const noexcept { return static_cast<size_t>(top_ - data_); }
  // Whether it holds more than n values.
  PTREAD_ALWAYS_INLINE bool above(size_t n) const noexcept { return top_ > data_ + n; }  // n <= size()
  // False (and nothing pushed) when it already holds limit() values.
  PTREAD_ALWAYS_INLINE bool push_back(uint32_t v) {
    if (PTREAD_LIKELY(top_ != end_)) {
      *top_++ = v;
      return true;
    }
    return grow_push(v);
  }
  uint32_t back() const noexcept { return top_[-1]; }
  void pop_back() noexcept { --top_; }
  const uint32_t* data() const noexcept { return data_; }
  uint32_t operator[](size_t i) const noexcept { return data_[i]; }
  void resize(size_t n) noexcept { top_ = data_ + n; }  // n <= size()
  void clear() noexcept { top_ = data_; }

 private:
  PTREAD_NOINLINE bool grow_push(uint32_t v) {
    const size_t n = size();
    if (n >= max_) return false;
    const size_t cap = n < 64 ? 128 : 2 * n;
    void* p = std::realloc(data_, cap * sizeof(uint32_t));
    if (p == nullptr) out_of_memory();
    data_ = static_cast<uint32_t*>(p);
    cap_ = cap;
    top_ = data_ + n;
    end_ = data_ + (cap_ < max_ ? cap_ : max_);
    *top_++ = v;
    return true;
  }
  uint32_t* data_ = nullptr;
  uint32_t* top_ = nullptr;
  uint32_t* end_ = nullptr;  // data_ + the lesser of the capacity and the limit
  size_t cap_ = 0;
  size_t max_ = SIZE_MAX;
};

// A vector whose elements never move: block k holds kBase << k elements. For trivially
// copyable, trivially destructible T.
template <class T>
class SegmentedVector {
  static_assert(std::is_trivially_copyable<T>::value && std::is_trivially_destructible<T>::value,
                "SegmentedVector holds plain values");
  static constexpr unsigned kLogBase = 8;
  static constexpr size_t kBase = size_t{1} << kLogBase;
  static constexpr size_t kMaxBlocks = 64 - kLogBase;  // more elements than memory can hold

 public:
  SegmentedVector() = default;
  explicit SegmentedVector(BlockPool* pool) noexcept : pool_(pool) {}  // its blocks from pool
  SegmentedVector(SegmentedVector&& o) noexcept { take(o); }
  SegmentedVector& operator=(SegmentedVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  SegmentedVector(const SegmentedVector&) = delete;
  SegmentedVector& operator=(const SegmentedVector&) = delete;
  ~SegmentedVector() { release(); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  PTREAD_ALWAYS_INLINE T& operator[](size_t i) noexcept { return *slot(i); }
  PTREAD_ALWAYS_INLINE const T& operator[](size_t i) const noexcept { return *slot(i); }

  PTREAD_ALWAYS_INLINE void push_back(const T& v) { ::new (static_cast<void*>(grow())) T(v); }

  // Drops the elements from n on (n <= size()); their blocks stay for the next ones.
  void truncate(size_t n) noexcept {
    if (n >= size_) return;
    size_ = n;
    if (n == 0 && blocks_ == 0) return;
    const size_t k = high_bit((n >> kLogBase) + 1);  // the block of element n
    cur_ = slot(n);
    end_ = block(k) + (kBase << k);
  }

  // The free room after the last element when the last block has n elements of it, else
  // nullptr; the caller may write it, and then add_in_place the elements it made.
  PTREAD_ALWAYS_INLINE T* room(size_t n) noexcept { return static_cast<size_t>(end_ - cur_) >= n ? cur_ : nullptr; }
  PTREAD_ALWAYS_INLINE void add_in_place(size_t n) noexcept {  // n <= the room
    cur_ += n;
    size_ += n;
  }

  // Room for one more element at the end, uninitialized: the caller writes it.
  PTREAD_ALWAYS_INLINE T* grow() {
    if (PTREAD_LIKELY(cur_ != end_)) {
      ++size_;
      return cur_++;
    }
    return grow_slow();
  }

 private:
  // Block k holds elements [first(k), first(k + 1)), first(k) = (kBase << k) - kBase: element
  // i is in block high_bit(i / kBase + 1). The graph looks up nodes millions of times per
  // file, so each block is kept as its address less first(k) elements (in uintptr_t
  // arithmetic, which wraps): element i is at that plus i elements.
  static size_t first(size_t k) noexcept { return (kBase << k) - kBase; }
  PTREAD_ALWAYS_INLINE T* slot(size_t i) const noexcept {
    return reinterpret_cast<T*>(shifted_[high_bit((i >> kLogBase) + 1)] + i * sizeof(T));
  }
  T* block(size_t k) const noexcept { return reinterpret_cast<T*>(shifted_[k] + first(k) * sizeof(T)); }
  PTREAD_NOINLINE T* grow_slow() {
    const size_t k = high_bit((size_ >> kLogBase) + 1);  // the block of element size_, which starts it
    if (k == kMaxBlocks) out_of_memory();
    T* b;
    if (k < blocks_) {  // kept by truncate()
      b = block(k);
    } else {
      b = static_cast<T*>(pool_ ? pool_->allocate(sizeof(T) * (kBase << k)) : block_alloc(sizeof(T) * (kBase << k)));
      shifted_[k] = reinterpret_cast<uintptr_t>(b) - first(k) * sizeof(T);
      blocks_ = k + 1;
    }
    cur_ = b + 1;
    end_ = b + (kBase << k);
    ++size_;
    return b;
  }
  void release() noexcept {
    if (pool_ == nullptr) {
      for (size_t k = 0; k < blocks_; ++k) block_free(block(k), sizeof(T) * (kBase << k));
    }
    blocks_ = 0;
    size_ = 0;
    cur_ = end_ = nullptr;
  }
  void take(SegmentedVector& o) noexcept {
    for (size_t k = 0; k < o.blocks_; ++k) shifted_[k] = o.shifted_[k];
    pool_ = o.pool_;
    blocks_ = o.blocks_;
    size_ = o.size_;
    cur_ = o.cur_;
    end_ = o.end_;
    o.blocks_ = 0;
    o.size_ = 0;
    o.cur_ = o.end_ = nullptr;
  }

  uintptr_t shifted_[kMaxBlocks];  // the first blocks_ of them are set
  BlockPool* pool_ = nullptr;      // where blocks come from, if not block_alloc
  size_t blocks_ = 0;
  size_t size_ = 0;
  T* cur_ = nullptr;  // the free part of the last block
  T* end_ = nullptr;
};

}  // namespace detail
}  // namespace ptread
