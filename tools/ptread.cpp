// ptread — the command-line tool (DESIGN.md "Command line", contract).
//
//   ptread ls [--json] [--sort name|size|file] FILE
//                                        tensors: name, dtype, shape, stored device, bytes
//   (ls, diff, stats, export, convert: --only GLOB / --exclude GLOB, shell patterns on names)
//   ptread tree FILE                     the object tree with metadata
//   ptread export FILE OUT.safetensors   every tensor safetensors can hold
//   ptread convert FILE OUT.pt [--dtype D] [--prefix P] [--strip-prefix P]
//                                        a state dict torch.load(weights_only=True) reads
//   ptread diff [--json] [--atol X] [--rtol Y] [--equal-nan] A B
//                                        tensors only in A, only in B, changed; exit 0 same, 1 not
//   ptread stats [--json] FILE [NAME...] per tensor min, max, mean, std, NaN/Inf/zero counts
//   ptread audit [--json] FILE           the globals torch.load would import, and which
//                                        torch.load(weights_only=True) would refuse
//
// Exit status: 0 done, 1 the file could not be read (or the output written), 2 wrong usage,
// 3 (audit) torch.load(weights_only=False) would import something it cannot vouch for.
// Output is built in one string and written once: listing 100,000 tensors must stay fast.

#include "cli/args.hpp"
#include "cli/audit.hpp"
#include "cli/diff.hpp"
#include "cli/ls.hpp"
#include "cli/stats.hpp"
#include "cli/tree.hpp"
#include "cli/write.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace ptread_cli;  // NOLINT(google-build-using-namespace): the tool's own namespace

int main(int argc, char** argv) {
  Args args;
  const int parsed = parse_args(argc, argv, &args);
  if (parsed >= 0) return parsed;

  ptread::Options options;
  options.mode = args.mode;
  options.threads = 0;  // every hardware thread: the directory walked beside the pickle, read mode's copies shared
  auto ck = ptread::Checkpoint::open(args.files[0], options);
  if (!ck) {
    std::fprintf(stderr, "ptread: %s\n", ck.error().what());
    return args.command == "diff" ? kExitUsage : kExitFailed;  // (diff: 1 means different)
  }
  if (args.command == "diff") return diff(*ck, args);
  if (args.command == "ls") {
    // The listing is written and flushed: exit without tearing down every tensor one by
    // one (the system frees the process at once; for 100,000 tensors that is most of the
    // time left).
    const SortBy by = args.sort.value_or(SortBy::file);
    const int status = args.json ? finish_stdout(ls_json(*ck, args.filter, by)) : ls_table(*ck, args.filter, by);
    std::fflush(stderr);
    std::_Exit(status);
  }
  if (args.command == "tree") {
    return finish_stdout(std::string("# format: ") + ck->format_name() + "\n" + TreePrinter().run(ck->root()));
  }
  if (args.command == "audit") return audit(*ck, args.json);
  if (args.command == "stats") return stats(*ck, args);
  if (args.command == "convert") return convert(*ck, args);
  return export_safetensors(*ck, args);
}
