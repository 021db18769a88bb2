// ptread's CUDA side of bench/run_cuda.sh, with its baselines measured in the same run:
//   cuda_bench UPLOAD.pt LINEAR.pt
// UPLOAD.pt, LINEAR.pt: what bench/make_cuda_inputs.py writes. Prints "name value" lines:
//   pinned_h2d_gbps        cudaMemcpyAsync from pinned memory (the copy engine's rate)
//   d2d_gbps               a device-to-device copy, bytes read + written (the bandwidth bound)
//   upload.<ring>.gbps     ptread::cuda::upload of UPLOAD.pt (tensor bytes / wall time, best of 3)
//   upload.<ring>.rss_growth_mib, .rss_file_mib, .rss_anon_mib
//                          host memory during the first upload: peak (VmHWM, reset first)
//                          minus resident before, and the file-backed / anonymous parts after
//   linear.<dtype>.m<M>.ptread_ms, .bound_ms
//                          cuda::Linear forward, N = K = 4096 (median of 20, CUDA events), and
//                          the time to read W, x and write y at d2d bandwidth
#include <ptread/cuda.cuh>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace pc = ptread::cuda;

[[noreturn]] void die(const ptread::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  std::exit(1);
}
template <class T>
T need(ptread::Result<T> r) {
  if (!r) die(r.error());
  return std::move(*r);
}
void need(const ptread::Status& s) {
  if (!s) die(s.error());
}
void check(cudaError_t e, const char* what) { need(pc::cuda_check(e, what)); }

void report(const std::string& name, double v) {
  std::printf("%s %.4f\n", name.c_str(), v);
  std::fflush(stdout);
}

uint64_t status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  uint64_t v = 0;
  while (f >> k) {
    if (k == key) {
      f >> v;
      return v;
    }
    std::getline(f, k);
  }
  return 0;
}

// Median ms of fn on `s` over `runs` runs after one warm-up (CUDA events).
template <class F>
double median_ms(cudaStream_t s, int runs, F&& fn) {
  fn();
  auto a = need(pc::Event::create(true)), b = need(pc::Event::create(true));
  std::vector<float> ms;
  for (int r = 0; r < runs; ++r) {
    need(a.record(s));
    fn();
    need(b.record(s));
    need(b.synchronize());
    float t = 0;
    check(cudaEventElapsedTime(&t, a.get(), b.get()), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double pinned_h2d_gbps(cudaStream_t s) {
  const size_t chunk = size_t{64} << 20, total = size_t{2} << 30;
  auto host = need(pc::PinnedBuffer::allocate(chunk));
  auto dev = need(pc::DeviceBuffer::allocate(total));
  std::memset(host.data(), 1, chunk);
  const double ms = median_ms(s, 5, [&] {
    for (size_t off = 0; off < total; off += chunk) {
      check(cudaMemcpyAsync(static_cast<char*>(dev.data()) + off, host.data(), chunk, cudaMemcpyHostToDevice, s),
            "cudaMemcpyAsync");
    }
  });
  return static_cast<double>(total) / (ms * 1e6);
}

double d2d_gbps(cudaStream_t s) {
  const size_t bytes = size_t{1} << 30;
  auto a = need(pc::DeviceBuffer::allocate(bytes)), b = need(pc::DeviceBuffer::allocate(bytes));
  check(cudaMemsetAsync(a.data(), 1, bytes, s), "cudaMemsetAsync");
  const double ms = median_ms(s, 10, [&] {
    check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}

void bench_upload(const std::string& path, const char* tag, size_t buffer_bytes, unsigned buffers) {
  auto ck = need(ptread::Checkpoint::open(path));
  pc::UploadOptions o;
  o.buffer_bytes = buffer_bytes;
  o.buffers = buffers;
  auto up = need(pc::Uploader::create(o));
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    uint64_t before = 0;
    if (run == 0) {
      std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
      before = status_kib("VmRSS:");
    }
    auto dev = need(up.upload(ck));
    const double gbps = static_cast<double>(dev.stats().host_bytes) / (dev.stats().seconds * 1e9);
    best = std::max(best, gbps);
    if (run == 0) {
      report(std::string("upload.") + tag + ".rss_growth_mib", static_cast<double>(status_kib("VmHWM:") - before) / 1024);
      report(std::string("upload.") + tag + ".rss_file_mib", static_cast<double>(status_kib("RssFile:")) / 1024);
      report(std::string("upload.") + tag + ".rss_anon_mib", static_cast<double>(status_kib("RssAnon:")) / 1024);
      report(std::string("upload.") + tag + ".gib", static_cast<double>(dev.stats().host_bytes) / (1u << 30));
      report(std::string("upload.") + tag + ".ring_mib", static_cast<double>(buffer_bytes * buffers) / (1u << 20));
    }
  }
  report(std::string("upload.") + tag + ".gbps", best);
}

void bench_linear(const std::string& path, double d2d, cudaStream_t s) {
  auto ck = need(ptread::Checkpoint::open(path));
  for (const char* dt : {"f32", "bf16"}) {
    auto fc = need(pc::Linear::from(ck, std::string("fc_") + dt));
    const size_t N = fc.out_features(), K = fc.in_features();
    const size_t es = ptread::dtype_size(fc.dtype());
    for (size_t m : {size_t{1}, size_t{8}, size_t{64}, size_t{4096}}) {
      auto x = need(pc::DeviceBuffer::allocate(m * K * sizeof(float)));
      auto y = need(pc::DeviceBuffer::allocate(m * N * sizeof(float)));
      check(cudaMemsetAsync(x.data(), 0, m * K * sizeof(float), s), "cudaMemsetAsync");
      const double ms = median_ms(s, 20, [&] {
        need(fc.forward(static_cast<const float*>(x.data()), m, static_cast<float*>(y.data()), s));
      });
      const std::string name = std::string("linear.") + dt + ".m" + std::to_string(m);
      const double bytes = static_cast<double>(N * K * es + m * K * sizeof(float) + m * N * sizeof(float));
      report(name + ".ptread_ms", ms);
      report(name + ".bound_ms", bytes / (d2d * 1e6));
      report(name + ".ptread_tflops", 2.0 * static_cast<double>(m * N * K) / (ms * 1e9));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s UPLOAD.pt LINEAR.pt\n", argv[0]);
    return 2;
  }
  auto n = pc::device_count();
  if (!n || *n == 0) {
    std::fprintf(stderr, "cuda_bench: no CUDA device (%s)\n", n ? "none found" : n.error().what());
    return 77;
  }
  std::printf("# device: %s\n", need(pc::device_description()).c_str());
  check(cudaFree(nullptr), "cudaFree(0)");  // the context, before anything is measured
  auto stream = need(pc::Stream::create());
  report("pinned_h2d_gbps", pinned_h2d_gbps(stream.get()));
  const double d2d = d2d_gbps(stream.get());
  report("d2d_gbps", d2d);
  bench_upload(argv[1], "ring4x16", size_t{16} << 20, 4);
  bench_upload(argv[1], "ring4x64", size_t{64} << 20, 4);
  bench_linear(argv[2], d2d, stream.get());
  return 0;
}
