// ptread — what the pickle VM asks of the layer above it: PickleHooks (persistent ids,
// calls, NEWOBJ, BUILD and torch.save's tensor runs) and the TensorRun it hands them; the
// opcodes' names for messages.
#pragma once

#include "value_graph.hpp"
#include "run_template.hpp"  // kRunMaxRank

#include <cstdint>
#include <string_view>

namespace ptread {
namespace detail {

// One tensor as torch.save pickles it (protocols 2 to 5), read by the VM in one go: the call
//   fn((tag, cls, key, location, numel[, None]), offset, size, stride, requires_grad, hooks_cls())
// that is the opcodes
//   fn MARK MARK tag cls key location numel [NONE] TUPLE BINPERSID offset size stride
//   NEWFALSE|NEWTRUE hooks_cls EMPTY_TUPLE REDUCE TUPLE REDUCE
// where fn, tag, cls and hooks_cls are memo gets; key and location memo gets or new text;
// numel and offset BININT1/BININT2/BININT/LONG1; size and stride tuples of such ints (at
// most kRunRank); and any value but an int, None, a bool, the storage and the call result
// may be memoized (BINPUT, LONG_BINPUT, MEMOIZE). Everything else goes opcode by opcode.
struct TensorRun {
  static constexpr uint32_t kRunRank = kRunMaxRank;
  uint32_t fn = 0, tag = 0, cls = 0, key = 0, location = 0, hooks_cls = 0;  // nodes
  // A key read as text, by this run or by the run whose key the memo gave (key is then
  // kNoNode): its text, in the pickle, and the lazy memo value that makes its node.
  std::string_view key_text;
  uint32_t key_lazy = 0;
  int64_t numel = 0, offset = 0;
  int64_t* dims = nullptr;   // rank sizes, then rank strides: in the graph's arena
  uint32_t rank = 0;
  bool pid_none = false;     // the persistent id has a sixth item, None
  bool requires_grad = false;
};

// What the VM cannot decide by itself.
class PickleHooks {
 public:
  virtual ~PickleHooks() = default;
  // A TensorRun: the node persistent_load and call would have made for it, with the same
  // effects on the hooks' state, or kNoNode to have the VM run its opcodes one by one (and
  // report any error there). The values in between (the persistent id, the size and stride
  // tuples, the hooks dict, the argument tuple) are made only if the pickle gets them from
  // the memo later.
  virtual uint32_t tensor_run(Graph& g, const TensorRun& run) {
    (void)g;
    (void)run;
    return kNoNode;
  }
  // BINPERSID / PERSID: returns the node standing for the persistent object.
  virtual Result<uint32_t> persistent_load(Graph& g, uint32_t pid) = 0;
  // REDUCE, INST, OBJ: callable(*args). Never runs anything.
  virtual Result<uint32_t> call(Graph& g, uint32_t callable, uint32_t args) = 0;
  // NEWOBJ, NEWOBJ_EX: cls.__new__(cls, *args), which for most classes is what a call makes.
  virtual Result<uint32_t> new_object(Graph& g, uint32_t cls, uint32_t args) { return call(g, cls, args); }
  // BUILD: obj.__setstate__(state) or obj.__dict__.update(state).
  virtual Status build(Graph& g, uint32_t obj, uint32_t state) = 0;
};

inline const char* opcode_name(uint8_t op) {
  switch (op) {
    case '(': return "MARK"; case '.': return "STOP"; case '0': return "POP";
    case '1': return "POP_MARK"; case '2': return "DUP"; case 'F': return "FLOAT";
    case 'I': return "INT"; case 'J': return "BININT"; case 'K': return "BININT1";
    case 'L': return "LONG"; case 'M': return "BININT2"; case 'N': return "NONE";
    case 'P': return "PERSID"; case 'Q': return "BINPERSID"; case 'R': return "REDUCE";
    case 'S': return "STRING"; case 'T': return "BINSTRING"; case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE"; case 'X': return "BINUNICODE"; case 'a': return "APPEND";
    case 'b': return "BUILD"; case 'c': return "GLOBAL"; case 'd': return "DICT";
    case '}': return "EMPTY_DICT"; case 'e': return "APPENDS"; case 'g': return "GET";
    case 'h': return "BINGET"; case 'i': return "INST"; case 'j': return "LONG_BINGET";
    case 'l': return "LIST"; case ']': return "EMPTY_LIST"; case 'o': return "OBJ";
    case 'p': return "PUT"; case 'q': return "BINPUT"; case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM"; case 't': return "TUPLE"; case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS"; case 'G': return "BINFLOAT"; case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ"; case 0x82: return "EXT1"; case 0x83: return "EXT2";
    case 0x84: return "EXT4"; case 0x85: return "TUPLE1"; case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3"; case 0x88: return "NEWTRUE"; case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1"; case 0x8b: return "LONG4"; case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES"; case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8"; case 0x8e: return "BINBYTES8"; case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS"; case 0x91: return "FROZENSET"; case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL"; case 0x94: return "MEMOIZE"; case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8"; case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

}  // namespace detail
}  // namespace ptread
