// Test checkpoints built in memory: a torch.save zip whose data.pkl is the state dict torch
// writes (protocol 2, _rebuild_tensor_v2 over persistent storage ids), for weights of any
// size made by the test itself. Tensors naming the same storage key share that storage.
//
//   ptread_test::StateDict sd;
//   sd.add("fc.weight", ptread::DType::BF16, {300, 264}, values);       // its own storage
//   sd.storage("s", ptread::DType::F32, bytes);                          // a shared one
//   sd.view("a", "s", {4, 3}, {1, 4}, 2);                                // a strided view of it
//   std::vector<uint8_t> file = sd.build();   // Checkpoint::open_memory(file.data(), file.size())
#pragma once

#include "../../support/zip_writer.hpp"

#include <ptread/dtype.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ptread_test {

class StateDict {
 public:
  void storage(const std::string& key, ptread::DType dtype, std::vector<uint8_t> bytes) {
    storages_[key] = Storage{dtype, std::move(bytes)};
  }

  // A view of storage `key` (which must exist when build() runs).
  void view(const std::string& name, const std::string& key, std::vector<int64_t> shape, std::vector<int64_t> strides,
            int64_t offset = 0) {
    tensors_.push_back(Entry{name, key, std::move(shape), std::move(strides), offset});
  }

  // A contiguous tensor with a storage of its own, values converted to dtype (F32, F16, BF16).
  void add(const std::string& name, ptread::DType dtype, std::vector<int64_t> shape, const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * ptread::dtype_size(dtype));
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype == ptread::DType::F32) {
        std::memcpy(bytes.data() + 4 * i, &values[i], 4);
      } else {
        const uint16_t h = dtype == ptread::DType::F16 ? ptread::detail::float_to_f16(values[i])
                                                       : ptread::detail::float_to_bf16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    const std::string key = "own" + std::to_string(storages_.size());
    storage(key, dtype, std::move(bytes));
    view(name, key, shape, contiguous(shape));
  }

  static std::vector<int64_t> contiguous(const std::vector<int64_t>& shape) {
    std::vector<int64_t> s(shape.size());
    int64_t acc = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      s[d] = acc;
      acc *= shape[d];
    }
    return s;
  }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> p = {0x80, 0x02, '}', '('};
    for (const Entry& e : tensors_) {
      const Storage& st = storages_.at(e.key);
      unicode(p, e.name);
      global(p, "torch._utils", "_rebuild_tensor_v2");
      p.push_back('(');
      p.push_back('(');
      unicode(p, "storage");
      global(p, "torch", storage_class(st.dtype));
      unicode(p, e.key);
      unicode(p, "cpu");
      integer(p, static_cast<int64_t>(st.bytes.size() / ptread::dtype_size(st.dtype)));
      p.push_back('t');
      p.push_back('Q');  // BINPERSID
      integer(p, e.offset);
      p.push_back('(');
      for (int64_t v : e.shape) integer(p, v);
      p.push_back('t');
      p.push_back('(');
      for (int64_t v : e.strides) integer(p, v);
      p.push_back('t');
      p.push_back(0x89);  // NEWFALSE: requires_grad
      global(p, "collections", "OrderedDict");
      p.push_back(')');
      p.push_back('R');
      p.push_back('t');
      p.push_back('R');
    }
    p.push_back('u');
    p.push_back('.');
    ZipWriter w;
    w.add("archive/data.pkl", p);
    for (const auto& kv : storages_) w.add("archive/data/" + kv.first, kv.second.bytes);
    w.add("archive/version", to_bytes("3\n"));
    return w.build().flat();
  }

 private:
  struct Storage {
    ptread::DType dtype;
    std::vector<uint8_t> bytes;
  };
  struct Entry {
    std::string name, key;
    std::vector<int64_t> shape, strides;
    int64_t offset;
  };

  static const char* storage_class(ptread::DType t) {
    switch (t) {
      case ptread::DType::F32: return "FloatStorage";
      case ptread::DType::F16: return "HalfStorage";
      case ptread::DType::BF16: return "BFloat16Storage";
      case ptread::DType::I64: return "LongStorage";
      case ptread::DType::I32: return "IntStorage";
      case ptread::DType::F64: return "DoubleStorage";
      default: return "ByteStorage";
    }
  }
  static void unicode(std::vector<uint8_t>& p, const std::string& s) {
    p.push_back('X');
    append32(p, s.size());
    append(p, s);
  }
  static void global(std::vector<uint8_t>& p, const std::string& module, const std::string& name) {
    p.push_back('c');
    append(p, module + "\n" + name + "\n");
  }
  static void integer(std::vector<uint8_t>& p, int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      p.push_back('J');  // BININT
      append32(p, static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {
      p.push_back(0x8a);  // LONG1, 8 bytes little-endian
      p.push_back(8);
      append64(p, static_cast<uint64_t>(v));
    }
  }

  std::map<std::string, Storage> storages_;
  std::vector<Entry> tensors_;
};

}  // namespace ptread_test
