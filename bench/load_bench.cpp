// Loading at the machine's limits: ptread and its in-process baselines, one measurement per
// call (run_load.sh starts a fresh process for each, so that memory figures start clean).
//   load_bench open FILE RUNS             open (mmap) and list every tensor
//   load_bench read FILE THREADS RUNS     open in read mode: every storage into its own buffer
//   load_bench clone FILE RUNS            open (mmap), then clone() every tensor
//   load_bench floor FILE RUNS            baselines over the same tensor bytes (see below)
//   load_bench convert MIB RUNS           F16 / BF16 -> F32 of MIB MiB of output, and memcpy
// Prints one line per figure: "key value". Times are medians in ms over RUNS runs, after one
// warm-up run; memory figures (MiB) are from /proc/self/status: RssAnon and RssFile growth
// while the result is held, and the peak (VmHWM) growth, reset before each run.
#include <ptread/ptread.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <malloc.h>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
volatile uint64_t sink;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

void out(const char* key, double v) {
  std::printf("%s %.4f\n", key, v);
  std::fflush(stdout);
}

// A field of /proc/self/status in MiB ("VmHWM", "RssAnon", "RssFile").
double status_mib(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  double v = -1;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') v = std::strtod(line + n + 1, nullptr) / 1024.0;
  }
  std::fclose(f);
  return v;
}
// Resets VmHWM to the current RSS (Linux >= 4.0).
void reset_peak() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return;
  std::fputs("5", f);
  std::fclose(f);
}

struct Memory {
  double anon, file, hwm;
  static Memory now() { return {status_mib("RssAnon"), status_mib("RssFile"), status_mib("VmHWM")}; }
};

// Runs `once` (which returns something to hold) RUNS + 1 times; reports the median time and,
// from the last run, the memory growth while its result is held and the peak growth.
template <class F>
int measure(const char* name, int runs, F&& once) {
  std::vector<double> ms;
  for (int r = 0; r <= runs; ++r) {
    reset_peak();
    const Memory before = Memory::now();
    const auto t0 = clock_type::now();
    auto held = once();
    const double t = ms_since(t0);
    if (!held) return 1;
    if (r > 0) ms.push_back(t);
    if (r == runs) {
      const Memory after = Memory::now();
      std::string k(name);
      out((k + ".anon_mib").c_str(), after.anon - before.anon);
      out((k + ".file_mib").c_str(), after.file - before.file);
      out((k + ".peak_mib").c_str(), after.hwm - before.anon - before.file);
    }
  }
  std::sort(ms.begin(), ms.end());
  out((std::string(name) + ".ms").c_str(), ms[ms.size() / 2]);
  out((std::string(name) + ".min_ms").c_str(), ms.front());
  return 0;
}

ptread::Result<ptread::Checkpoint> open_or_say(const std::string& path, const ptread::Options& o) {
  auto ck = ptread::Checkpoint::open(path, o);
  if (!ck) std::fprintf(stderr, "%s\n", ck.error().what());
  return ck;
}

// The storages' bytes of a checkpoint, each once: what materializing it has to copy.
struct Range {
  const uint8_t* data;
  size_t size;
};
std::vector<Range> storage_ranges(const ptread::Checkpoint& ck) {
  std::vector<Range> r;
  for (const auto& nt : ck.tensors()) {
    const ptread::Storage* s = nt.tensor.storage().get();
    if (std::none_of(r.begin(), r.end(), [&](const Range& x) { return x.data == s->data(); })) {
      r.push_back({s->data(), s->nbytes()});
    }
  }
  return r;
}

uint64_t checksum(const ptread::Checkpoint& ck) {
  uint64_t c = 0;
  for (const auto& nt : ck.tensors()) {
    const auto* p = nt.tensor.storage()->data();
    const size_t n = nt.tensor.storage()->nbytes();
    for (size_t k = 0; k + 8 <= n; k += 4096 + 8) {
      uint64_t w;
      std::memcpy(&w, p + k, 8);
      c = c * 31 + w;
    }
  }
  return c;
}

int cmd_open(const std::string& path, int runs) {
  const ptread::Options o;
  size_t tensors = 0;
  uint64_t bytes = 0;
  const int rc = measure("open", runs, [&] {
    auto ck = open_or_say(path, o);
    if (ck) {
      tensors = 0;
      bytes = 0;
      for (const auto& nt : ck->tensors()) {  // the listing: names, shapes, sizes
        bytes += nt.tensor.nbytes();
        tensors += nt.name.empty() ? 0 : 1;
      }
    }
    return ck;
  });
  out("open.tensors", static_cast<double>(tensors));
  out("open.tensor_mib", static_cast<double>(bytes) / 1048576.0);
  return rc;
}

int cmd_read(const std::string& path, unsigned threads, int runs) {
  ptread::Options o;
  o.mode = ptread::LoadMode::read;
  o.threads = threads;
  uint64_t sum = 0;
  const std::string name = "read.t" + std::to_string(threads);
  const int rc = measure(name.c_str(), runs, [&] {
    auto ck = open_or_say(path, o);
    if (ck) sum = checksum(*ck);
    return ck;
  });
  // The bytes read equal the mapped file's.
  auto mapped = open_or_say(path, ptread::Options{});
  if (!mapped || checksum(*mapped) != sum) {
    std::fprintf(stderr, "load_bench: read mode gave other bytes than mmap mode\n");
    return 1;
  }
  return rc;
}

int cmd_clone(const std::string& path, int runs) {
  auto ck = open_or_say(path, ptread::Options{});
  if (!ck) return 1;
  return measure("clone", runs, [&] {
    std::vector<ptread::Tensor> owned;
    owned.reserve(ck->tensors().size());
    bool ok = true;
    for (const auto& nt : ck->tensors()) {
      auto c = nt.tensor.clone();
      ok = ok && c.ok();
      if (c) owned.push_back(std::move(*c));
    }
    return ok ? std::make_unique<std::vector<ptread::Tensor>>(std::move(owned)) : nullptr;
  });
}

// Baselines over the storages' bytes (the file mapped, its pages touched first, so the
// source costs nothing): memcpy into fresh memory (aligned_alloc per storage, untouched:
// the kernel's page faults included; and fresh memory asked for as huge pages), memcpy into
// memory touched before the timer, and pread from the file (page cache) into fresh and into
// touched memory.
int cmd_floor(const std::string& path, int runs) {
  auto ck = open_or_say(path, ptread::Options{});
  if (!ck) return 1;
  const std::vector<Range> ranges = storage_ranges(*ck);
  uint64_t total = 0;
  for (const Range& r : ranges) {
    total += r.size;
    uint64_t s = 0;
    for (size_t k = 0; k < r.size; k += 4096) s += r.data[k];
    sink = s;
  }
  const uint8_t* base = nullptr;  // the mapping's start, for pread offsets
  for (const Range& r : ranges) base = base == nullptr || r.data < base ? r.data : base;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 1;
  // Storage offsets in the file: the mapping covers the whole file from offset 0, so an
  // address minus the lowest storage's address plus its file offset. Found by search once.
  off_t base_off = -1;
  {
    std::vector<uint8_t> probe(64);
    struct stat st;
    ::fstat(fd, &st);
    for (off_t off = 0; off + 64 <= st.st_size && base_off < 0; off += 64) {
      if (::pread(fd, probe.data(), 64, off) == 64 && std::memcmp(probe.data(), base, 64) == 0) base_off = off;
    }
  }
  if (base_off < 0) return 1;
  using Buffers = std::vector<std::unique_ptr<uint8_t, void (*)(void*)>>;
  auto fresh = [&] {
    auto b = std::make_unique<Buffers>();
    for (const Range& r : ranges) {
      b->emplace_back(static_cast<uint8_t*>(std::aligned_alloc(64, (r.size + 63) & ~size_t{63})), &std::free);
    }
    return b;
  };
  auto touched = fresh();
  for (size_t k = 0; k < ranges.size(); ++k) std::memset((*touched)[k].get(), 1, ranges[k].size);
  int rc = measure("floor.memcpy_fresh", runs, [&] {
    auto b = fresh();
    for (size_t k = 0; k < ranges.size(); ++k) std::memcpy((*b)[k].get(), ranges[k].data, ranges[k].size);
    return b;
  });
  // The same into fresh memory asked for as transparent huge pages (what ptread's big
  // buffers are): the floor for a loader that allocates as ptread does.
  rc |= measure("floor.memcpy_fresh_thp", runs, [&] {
    struct Map {
      void* p;
      size_t n;
      ~Map() { ::munmap(p, n); }
    };
    auto maps = std::make_unique<std::vector<std::unique_ptr<Map>>>();
    for (const Range& r : ranges) {
      const size_t n = (r.size + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
      void* p = ::mmap(nullptr, n + (size_t{2} << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return decltype(maps)();
      maps->push_back(std::make_unique<Map>());
      maps->back()->p = p;
      maps->back()->n = n + (size_t{2} << 20);
      auto* a = static_cast<uint8_t*>(p);
      a += ((size_t{2} << 20) - reinterpret_cast<uintptr_t>(a) % (size_t{2} << 20)) % (size_t{2} << 20);
      ::madvise(a, n, MADV_HUGEPAGE);
      std::memcpy(a, r.data, r.size);
    }
    return maps;
  });
  rc |= measure("floor.memcpy_touched", runs, [&] {
    for (size_t k = 0; k < ranges.size(); ++k) std::memcpy((*touched)[k].get(), ranges[k].data, ranges[k].size);
    return std::make_unique<int>(1);
  });
  auto pread_all = [&](Buffers& b) {
    for (size_t k = 0; k < ranges.size(); ++k) {
      const off_t off = base_off + (ranges[k].data - base);
      size_t done = 0;
      while (done < ranges[k].size) {
        const ssize_t got = ::pread(fd, b[k].get() + done, ranges[k].size - done, off + static_cast<off_t>(done));
        if (got <= 0) return false;
        done += static_cast<size_t>(got);
      }
    }
    return true;
  };
  rc |= measure("floor.pread_fresh", runs, [&] {
    auto b = fresh();
    return pread_all(*b) ? std::move(b) : nullptr;
  });
  rc |= measure("floor.pread_touched", runs, [&] { return pread_all(*touched) ? std::make_unique<int>(1) : nullptr; });
  ::close(fd);
  out("floor.mib", static_cast<double>(total) / 1048576.0);
  return rc;
}

// F16 and BF16 -> F32 through Tensor::copy_to (the vector kernels), against memcpy of the
// same output bytes; both write into memory touched before the timer. "generic" is the same
// call with the kernels held to the portable C++ level.
int cmd_convert(size_t mib, int runs) {
  const size_t n = mib * 1048576 / 4;  // elements: mib MiB of F32 output
  std::vector<uint16_t> half(n);
  for (size_t k = 0; k < n; ++k) half[k] = static_cast<uint16_t>((k * 2654435761u) >> 7);
  std::vector<float> dst(n, 1.0f), src32(n, 2.0f);
  auto storage = std::make_shared<const ptread::Storage>(reinterpret_cast<const uint8_t*>(half.data()), n * 2, nullptr);
  int rc = measure("convert.memcpy", runs, [&] {
    std::memcpy(dst.data(), src32.data(), n * 4);
    return std::make_unique<int>(1);
  });
  for (ptread::DType dt : {ptread::DType::F16, ptread::DType::BF16}) {
    auto t = ptread::Tensor::view(storage, dt, {static_cast<int64_t>(n)}, {1}, 0);
    if (!t) return 1;
    for (auto isa : {ptread::detail::nn_detect_isa(), ptread::detail::NnIsa::generic}) {
      ptread::detail::nn_set_isa(isa);
      const std::string name = std::string("convert.") + ptread::dtype_name(dt) + "." +
                               (isa == ptread::detail::NnIsa::generic ? "generic" : "best");
      rc |= measure(name.c_str(), runs, [&] {
        return t->copy_to(dst.data(), n * 4, ptread::DType::F32).ok() ? std::make_unique<int>(1) : nullptr;
      });
    }
    ptread::detail::nn_set_isa(ptread::detail::nn_detect_isa());
  }
  std::printf("convert.isa %s\n", ptread::detail::nn_isa_name(ptread::detail::nn_detect_isa()));
  out("convert.mib", static_cast<double>(mib));
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  // Every large buffer comes fresh from the kernel and goes back on free, for ptread and the
  // baselines alike (glibc would otherwise raise its mmap threshold after the first free and
  // hand later runs memory already faulted in).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
  const std::string cmd = argc > 1 ? argv[1] : "";
  auto arg = [&](int i) { return std::string(i < argc ? argv[i] : ""); };
  auto num = [&](int i, int dflt) { return i < argc ? std::atoi(argv[i]) : dflt; };
  if (cmd == "open" && argc >= 3) return cmd_open(arg(2), num(3, 20));
  if (cmd == "read" && argc >= 4) return cmd_read(arg(2), static_cast<unsigned>(num(3, 1)), num(4, 5));
  if (cmd == "clone" && argc >= 3) return cmd_clone(arg(2), num(3, 5));
  if (cmd == "floor" && argc >= 3) return cmd_floor(arg(2), num(3, 5));
  if (cmd == "convert" && argc >= 3) return cmd_convert(static_cast<size_t>(num(2, 256)), num(3, 9));
  std::fprintf(stderr,
               "usage: load_bench open FILE [RUNS] | read FILE THREADS [RUNS] | clone FILE [RUNS] |\n"
               "       floor FILE [RUNS] | convert MIB [RUNS]\n");
  return 2;
}
