// ptread — torch.save's zip format (PyTorch >= 1.6) and the tensors of TorchScript archives.
//
// Records under one folder (the "archive prefix", found as the folder holding data.pkl):
//   data.pkl           the pickled object; storages are persistent ids (see torch_pickle.hpp)
//   data/<key>         each storage's raw bytes, stored (uncompressed), 64-byte aligned
//   byteorder          "little" or "big" (torch >= 2.1; absent means little)
//   version or .data/version, .format_version, .storage_alignment, .data/serialization_id
//   constants.pkl      present in TorchScript archives (torch.jit.save)
#pragma once

#include "../zip.hpp"
#include "naming.hpp"
#include "torch_pickle.hpp"

#include <algorithm>

namespace ptread {
namespace detail {

inline void byteswap_elements(uint8_t* p, size_t nbytes, size_t unit) {
  if (unit <= 1) return;
  for (size_t k = 0; k + unit <= nbytes; k += unit) std::reverse(p + k, p + k + unit);
}

struct ReadOptions {
  LoadMode mode = LoadMode::mmap;
  Limits limits;
};

inline Result<std::shared_ptr<Model>> read_zip_checkpoint(std::shared_ptr<const Source> src, const ReadOptions& opt) {
  PTREAD_TRY(ZipArchive zip, ZipArchive::open(src, opt.limits));
  // The folder holding data.pkl; the shallowest wins.
  const ZipEntry* pkl = nullptr;
  size_t best_depth = SIZE_MAX;
  for (const auto& e : zip.entries()) {
    const std::string& n = e.name;
    if (n == "data.pkl" || (n.size() > 9 && n.compare(n.size() - 9, 9, "/data.pkl") == 0)) {
      const size_t depth = static_cast<size_t>(std::count(n.begin(), n.end(), '/'));
      if (depth < best_depth) {
        best_depth = depth;
        pkl = &e;
      }
    }
  }
  if (pkl == nullptr) {
    std::string names;
    for (size_t k = 0; k < zip.entries().size() && k < 5; ++k) names += (k ? ", '" : "'") + zip.entries()[k].name + "'";
    return make_error(ErrorCode::no_data_pkl,
                      "zip archive '" + src->name() + "' has no data.pkl record (" +
                          std::to_string(zip.entries().size()) + " records" +
                          (names.empty() ? std::string() : ": " + names) + "): not a torch.save file");
  }
  auto model = std::make_shared<Model>();
  Model& m = *model;
  m.archive_prefix = pkl->name.substr(0, pkl->name.size() - 8);
  const std::string& prefix = m.archive_prefix;
  m.format = zip.find(prefix + "constants.pkl") ? Format::torchscript : Format::zip;

  if (const ZipEntry* bo = zip.find(prefix + "byteorder")) {
    PTREAD_TRY(Bytes b, zip.read(*bo));
    std::string order(reinterpret_cast<const char*>(b.data), std::min<size_t>(b.size, 16));
    while (!order.empty() && std::isspace(static_cast<unsigned char>(order.back()))) order.pop_back();
    if (order == "big") {
      m.big_endian = true;
    } else if (order != "little") {
      return make_error(ErrorCode::zip_corrupt, "record '" + bo->name + "' says byte order '" + order + "'");
    }
  }
  if (pkl->uncompressed_size > opt.limits.max_pickle_bytes) {
    return make_error(ErrorCode::limit_exceeded, "data.pkl is larger than Limits::max_pickle_bytes");
  }
  PTREAD_TRY(Bytes pickle, zip.read(*pkl));

  const bool copy_storages = opt.mode == LoadMode::read;
  const bool swap = m.big_endian;
  const ZipArchive& z = zip;
  StorageLoader loader = [&z, &prefix, copy_storages, swap](const std::string& key, uint64_t nbytes, DType dtype)
      -> Result<std::shared_ptr<const Storage>> {
    const std::string name = prefix + "data/" + key;
    const ZipEntry* e = z.find(name);
    if (e == nullptr) {
      return make_error(ErrorCode::record_missing,
                        "storage record '" + name + "' named by data.pkl is missing from the archive");
    }
    if (e->uncompressed_size < nbytes) {
      return make_error(ErrorCode::storage_too_small,
                        "storage record '" + name + "' holds " + std::to_string(e->uncompressed_size) +
                            " bytes; data.pkl says it holds " + std::to_string(nbytes));
    }
    PTREAD_TRY(Bytes b, z.read(*e));
    const bool owned = b.owner.get() != static_cast<const void*>(&z.source());
    if (swap && dtype_swap_unit(dtype) > 1) {
      // Stored big-endian: convert into a buffer of our own (never write to the mapping).
      PTREAD_TRY(auto buf, allocate_aligned(b.size));
      std::memcpy(buf.get(), b.data, b.size);
      byteswap_elements(buf.get(), b.size, dtype_swap_unit(dtype));
      const uint8_t* p = buf.get();
      return std::make_shared<const Storage>(p, b.size, std::move(buf));
    }
    if (copy_storages && !owned) {
      PTREAD_TRY(auto buf, allocate_aligned(b.size));
      std::memcpy(buf.get(), b.data, b.size);
      const uint8_t* p = buf.get();
      return std::make_shared<const Storage>(p, b.size, std::move(buf));
    }
    return std::make_shared<const Storage>(b.data, b.size, std::move(b.owner));
  };

  TorchHooks hooks(m, std::move(loader), opt.limits);
  PickleVM vm(m.graph, hooks, opt.limits, pkl->name);
  PTREAD_TRY(m.root, vm.run(pickle.data, pickle.size));
  PTREAD_CHECK(name_tensors(m, opt.limits));
  return model;
}

}  // namespace detail
}  // namespace ptread
