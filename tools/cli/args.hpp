// ptread (the tool) — the command line: usage text and argument parsing.
#pragma once

#include "filter.hpp"
#include "ls.hpp"
#include "output.hpp"
#include "quantized_out.hpp"
#include "shards.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace ptread_cli {

constexpr char kUsage[] =
    "usage: ptread <command> [options] FILE...\n"
    "\n"
    "Reads PyTorch checkpoints (.pt, .pth, .bin, .ckpt) without Python or LibTorch.\n"
    "\n"
    "commands:\n"
    "  ls FILE                      list the tensors: name, dtype, shape, device, bytes\n"
    "  ls --json FILE               the same as JSON\n"
  "  ls --sort name|size|file     rows by name, by bytes (largest first) or as\n"
  "                               stored (the default)\n"
    "  tree FILE                    the object tree with its metadata\n"
    "  export FILE OUT.safetensors  write every tensor safetensors can hold\n"
    "  convert FILE OUT.pt          write the tensors as a state dict (zip format) that\n"
    "                               torch.load(OUT.pt, weights_only=True) reads\n"
    "  diff A B                     tensors only in A, only in B, changed (dtype, shape\n"
  "                               or values: mismatched elements, largest differences)\n"
  "  stats FILE [NAME...]         per tensor min, max, mean, std (float64, as torch)\n"
  "                               and counts of NaN, +Inf, -Inf and zeros\n"
  "  audit FILE                   the globals torch.load would import; those\n"
    "                               torch.load(weights_only=True) refuses are marked\n"
    "\n"
    "options:\n"
    "  --json                       (ls, diff, stats, audit) print JSON\n"
  "  --atol X, --rtol Y           (diff) values close as torch.allclose says (the other\n"
  "                               one at torch's default); without them, bit for bit\n"
  "  --equal-nan                  (diff, with --atol/--rtol) NaN equals NaN\n"
  "  --only GLOB                  (ls, diff, stats, export, convert) only the tensors\n"
  "                               whose names match a shell pattern ('encoder.*',\n"
  "                               '*.weight'); repeated: any of them\n"
  "  --exclude GLOB               (ls, diff, stats, export, convert) leave out the\n"
  "                               tensors whose names match; repeatable\n"
    "  --mode mmap|read             map the file (default) or read it into memory\n"
    "  --dtype F16|BF16|F32|F64     (convert) write floating tensors as this dtype;\n"
    "                               integer, bool and complex tensors stay as they are\n"
    "  --prefix P                   (convert) only the tensors named P or P.*\n"
    "  --strip-prefix P             (convert) remove a leading 'P.' from the names\n"
    "  --quantized int|dequantize|skip\n"
  "                               (export) quantized tensors as their integers with\n"
  "                               NAME.scale and NAME.zero_point, as float32 values,\n"
  "                               or not at all (the default)\n"
  "  --max-shard-size SIZE        (export, convert) write a sharded set into the folder\n"
    "                               OUT: shards of at most SIZE (5GB, 500MB, 2GiB) and\n"
    "                               transformers' index JSON; FILE may be a set's folder\n"
    "  -h, --help                   print this help\n"
    "  --version                    print the version\n"
    "\n"
    "exit status: 0 done, 1 the file could not be read or written, 2 wrong usage,\n"
    "             3 (audit) a global torch.load(weights_only=True) would refuse;\n"
    "             diff: 0 the same, 1 different, 2 trouble (as cmp)\n";


struct Args {
  std::string command;
  std::vector<std::string> files;
  bool json = false;
  ptread::LoadMode mode = ptread::LoadMode::mmap;
  // convert
  std::optional<ptread::DType> dtype;
  std::optional<std::string> prefix, strip_prefix;
  // export, convert: write a sharded set of shards of at most this many bytes
  std::optional<uint64_t> max_shard_size;
  // ls, export, convert: --only / --exclude
  NameFilter filter;
  // ls
  std::optional<SortBy> sort;
  // export
  std::optional<QuantizedOut> quantized;
  // diff
  std::optional<double> atol, rtol;
  bool equal_nan = false;
};

// A tolerance: a finite number >= 0.
inline bool parse_tolerance(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !(v >= 0) || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

inline int usage_error(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "ptread: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return kExitUsage;
}

// Returns -1 when the command should run, else the exit status.
inline int parse_args(int argc, char** argv, Args* args) {
  std::vector<std::string> positional;
  std::string error, value;
  bool help = false, version = false, options_done = false;
  int i = 1;
  // "--name VALUE" or "--name=VALUE": true when `a` is the option, with *out its value.
  auto option_value = [&](const std::string& a, const std::string& name, std::string* out) {
    if (a.compare(0, name.size() + 1, name + "=") == 0) {
      *out = a.substr(name.size() + 1);
      return true;
    }
    if (a != name) return false;
    if (i + 1 < argc) {
      *out = argv[++i];
    } else {
      out->clear();
      if (error.empty()) error = name + " needs a value";
    }
    return true;
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      positional.push_back(a);
    } else if (a == "--") {
      options_done = true;
    } else if (a == "-h" || a == "--help") {
      help = true;
    } else if (a == "--version") {
      version = true;
    } else if (a == "--json") {
      args->json = true;
    } else if (option_value(a, "--mode", &value)) {
      if (value == "mmap") {
        args->mode = ptread::LoadMode::mmap;
      } else if (value == "read") {
        args->mode = ptread::LoadMode::read;
      } else if (error.empty()) {
        error = "unknown mode '" + value + "' (use mmap or read)";
      }
    } else if (option_value(a, "--dtype", &value)) {
      std::string upper = value;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      ptread::DType d;
      if (ptread::dtype_from_name(upper, &d) && ptread::detail::is_float_dtype(d)) {
        args->dtype = d;
      } else if (error.empty()) {
        error = "unknown --dtype '" + value + "' (use F16, BF16, F32 or F64)";
      }
    } else if (option_value(a, "--prefix", &value)) {
      args->prefix = value;
    } else if (option_value(a, "--strip-prefix", &value)) {
      args->strip_prefix = value;
    } else if (option_value(a, "--only", &value)) {
      args->filter.only.emplace_back(value);
    } else if (option_value(a, "--exclude", &value)) {
      args->filter.exclude.emplace_back(value);
    } else if (option_value(a, "--sort", &value)) {
      if (value == "name" || value == "size" || value == "file") {
        args->sort = value == "name" ? SortBy::name : value == "size" ? SortBy::size : SortBy::file;
      } else if (error.empty()) {
        error = "unknown --sort '" + value + "' (use name, size or file)";
      }
    } else if (a == "--equal-nan") {
      args->equal_nan = true;
    } else if (option_value(a, "--atol", &value) || option_value(a, "--rtol", &value)) {
      double v = 0;
      if (parse_tolerance(value, &v)) {
        (a.compare(0, 6, "--atol") == 0 ? args->atol : args->rtol) = v;
      } else if (error.empty()) {
        error = "unknown tolerance '" + value + "' (a number >= 0)";
      }
    } else if (option_value(a, "--quantized", &value)) {
      if (value == "int" || value == "dequantize" || value == "skip") {
        args->quantized = value == "int" ? QuantizedOut::int_repr : value == "dequantize" ? QuantizedOut::dequantize : QuantizedOut::skip;
      } else if (error.empty()) {
        error = "unknown --quantized '" + value + "' (use int, dequantize or skip)";
      }
    } else if (option_value(a, "--max-shard-size", &value)) {
      uint64_t bytes = 0;
      if (parse_size(value, &bytes)) {
        args->max_shard_size = bytes;
      } else if (error.empty()) {
        error = "unknown --max-shard-size '" + value + "' (a size: 5GB, 500MB, 2GiB, or bytes)";
      }
    } else if (error.empty()) {
      error = "unknown option '" + a + "'";
    }
  }
  if (help || (!positional.empty() && positional[0] == "help")) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (version) {
    std::printf("ptread %s\n", PTREAD_VERSION_STRING);
    return kExitOk;
  }
  if (!error.empty()) return usage_error(error);
  if (positional.empty()) return usage_error("");
  args->command = positional[0];
  args->files.assign(positional.begin() + 1, positional.end());
  size_t want = 0;
  if (args->command == "ls" || args->command == "tree" || args->command == "audit") {
    want = 1;
  } else if (args->command == "diff") {
    want = 2;
  } else if (args->command == "stats") {
    want = std::max<size_t>(1, args->files.size());  // FILE [NAME...]
  } else if (args->command == "export" || args->command == "convert") {
    want = 2;
  } else {
    return usage_error("unknown command '" + args->command + "'");
  }
  if (args->json && args->command != "ls" && args->command != "audit" && args->command != "stats" && args->command != "diff") {
    return usage_error("--json is an option of ls, diff, stats and audit");
  }
  if ((args->atol || args->rtol || args->equal_nan) && args->command != "diff") {
    return usage_error("--atol, --rtol and --equal-nan are options of diff");
  }
  if (args->equal_nan && !args->atol && !args->rtol) {
    return usage_error("--equal-nan needs --atol or --rtol (without them values compare bit for bit)");
  }
  if (args->max_shard_size && args->command != "convert" && args->command != "export") {
    return usage_error("--max-shard-size is an option of export and convert");
  }
  if (!args->filter.empty() && args->command != "ls" && args->command != "stats" && args->command != "export" &&
      args->command != "convert" && args->command != "diff") {
    return usage_error("--only and --exclude are options of ls, diff, stats, export and convert");
  }
  if (args->sort && args->command != "ls") return usage_error("--sort is an option of ls");
  if (args->quantized && args->command != "export") return usage_error("--quantized is an option of export");
  if ((args->dtype || args->prefix || args->strip_prefix) && args->command != "convert") {
    return usage_error("--dtype, --prefix and --strip-prefix are options of convert");
  }
  if (args->files.size() != want) {
    return usage_error(args->command + (args->command == "stats"        ? " takes FILE [NAME...]"
                                        : args->command == "diff"       ? " takes A and B"
                                        : want == 1                       ? " takes one FILE"
                                        : args->command == "export" ? " takes FILE and OUT.safetensors"
                                                                    : " takes FILE and OUT.pt"));
  }
  return -1;
}

}  // namespace ptread_cli
