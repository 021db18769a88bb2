// ptread — a loaded sparse tensor checked as torch.load checks it.
//
// torch rebuilds a sparse tensor with an unchecked constructor (_sparse_coo_tensor_unsafe,
// _sparse_csr_tensor_unsafe), which checks the parts' ranks, sizes and index dtypes, and
// once the whole file is read torch.load checks every index
// (torch._utils._validate_loaded_sparse_tensors: _validate_sparse_coo_tensor_args,
// _validate_sparse_compressed_tensor_args) and refuses the file when one fails. ptread
// does the same after the pickle, so no SparseTensor it hands out holds an index outside
// its shape. (This reads the index parts' bytes while opening: the one exception to "an
// mmap open touches no tensor byte".)
#pragma once

#include "../quantized.hpp"

#include <cstring>
#include <string>

namespace ptread {
namespace detail {

// "[a, b, ...]" of d[from, to) (a shape vector converts to Dims).
inline std::string dims_text(Dims d, size_t from = 0, size_t to = ~size_t{0}) {
  std::string s = "[";
  for (size_t k = from; k < d.size() && k < to; ++k) s += (k > from ? ", " : "") + std::to_string(d[k]);
  return s + "]";
}

// Integer index elements (I32 or I64) of a tensor, by element index along its strides.
class IndexReader {
 public:
  explicit IndexReader(const Tensor& t)
      : p_(static_cast<const uint8_t*>(t.data_ptr())), i32_(t.dtype() == DType::I32), strides_(t.strides()) {}
  int64_t at(int64_t element_offset) const {
    const uint8_t* e = p_ + element_offset * (i32_ ? 4 : 8);
    if (i32_) {
      int32_t v;
      std::memcpy(&v, e, 4);
      return v;
    }
    int64_t v;
    std::memcpy(&v, e, 8);
    return v;
  }
  int64_t stride(size_t d) const { return strides_[d]; }

 private:
  const uint8_t* p_;
  bool i32_;
  Dims strides_;
};

inline Error sparse_error(const std::string& what) {
  return make_error(ErrorCode::bad_tensor_args, "sparse tensor: " + what + " (torch.load refuses it)");
}

// COO: indices [sparse_dim, nnz] int64, values [nnz, dense...], size = sparse + dense dims,
// every index in [0, size[d]). budget: index elements that may still be read.
inline Status check_sparse_coo(const SparseTensor& t, uint64_t* budget) {
  const Tensor& ix = t.indices;
  const Tensor& v = t.values;  // (a 0-dim one was made [1] at the rebuild, as torch expands it)
  if (ix.dim() == 0) return sparse_error("0-dim indices");
  const int64_t sparse_dim = ix.shape()[0];
  const int64_t dense_dim = static_cast<int64_t>(v.dim()) - 1;
  if (static_cast<int64_t>(t.shape.size()) != sparse_dim + dense_dim) {
    return sparse_error("number of dimensions must be sparse_dim (" + std::to_string(sparse_dim) + ") + dense_dim (" +
                        std::to_string(dense_dim) + "), but got " + std::to_string(t.shape.size()));
  }
  if (ix.dtype() != DType::I64) {
    // torch converts indices of another dtype to int64; torch.save writes int64
    return make_error(ErrorCode::bad_tensor_args, std::string("sparse tensor: COO indices of dtype ") + dtype_name(ix.dtype()) +
                                                      " (ptread reads int64 ones, as torch writes them)");
  }
  if (ix.dim() != 2) return sparse_error("indices must be sparse_dim x nnz, but got " + dims_text(ix.shape()));
  const int64_t nnz = ix.shape()[1];
  if (v.shape()[0] != nnz) {
    return sparse_error("indices and values must have same nnz, but got nnz from indices: " + std::to_string(nnz) +
                        ", nnz from values: " + std::to_string(v.shape()[0]));
  }
  for (size_t d = 1; d < v.dim(); ++d) {
    if (v.shape()[d] != t.shape[static_cast<size_t>(sparse_dim) + d - 1]) {
      return sparse_error("values has incorrect size, expected [" + std::to_string(nnz) + ", " +
                          dims_text(t.shape, static_cast<size_t>(sparse_dim)).substr(1) + ", got " + dims_text(v.shape()));
    }
  }
  if (ix.numel() == 0) return {};
  if (static_cast<uint64_t>(ix.numel()) > *budget) {
    return make_error(ErrorCode::limit_exceeded, "sparse tensor: " + std::to_string(ix.numel()) +
                                                     " indices to check, more than the file has bytes (an expanded view)");
  }
  *budget -= static_cast<uint64_t>(ix.numel());
  const IndexReader r(ix);
  for (int64_t d = 0; d < sparse_dim; ++d) {
    const int64_t size = t.shape[static_cast<size_t>(d)];
    for (int64_t j = 0; j < nnz; ++j) {
      const int64_t i = r.at(d * r.stride(0) + j * r.stride(1));
      if (i < 0) return sparse_error("found negative index " + std::to_string(i) + " for dim " + std::to_string(d));
      if (i >= size) {
        return sparse_error("size is inconsistent with indices: for dim " + std::to_string(d) + ", size is " +
                            std::to_string(size) + " but found index " + std::to_string(i));
      }
    }
  }
  return {};
}

// CSR, CSC, BSR, BSC: compressed [batch..., n + 1] and plain [batch..., nnz] indices (both
// int32 or both int64), values [batch..., nnz, block..., dense...]; torch's invariants on
// the indices of each batch: compressed[0] == 0, compressed[-1] == nnz, 0 <= steps <= the
// plain dimension, 0 <= plain < the plain dimension, sorted and distinct in each row.
inline Status check_sparse_compressed(const SparseTensor& t, uint64_t* budget) {
  const bool rows = t.layout == SparseLayout::csr || t.layout == SparseLayout::bsr;
  const bool blocked = t.layout == SparseLayout::bsr || t.layout == SparseLayout::bsc;
  const char* cname = rows ? "crow_indices" : "ccol_indices";
  const char* pname = rows ? "col_indices" : "row_indices";
  const Tensor& c = t.compressed_indices;
  const Tensor& p = t.plain_indices;
  const Tensor& v = t.values;
  if (c.dim() < 1) return sparse_error(std::string(cname) + " must have dimensionality >= 1 but got " + std::to_string(c.dim()));
  if (c.dim() != p.dim()) {
    return sparse_error(std::string(cname) + " and " + pname + " dimensionalities must be equal but got " +
                        std::to_string(c.dim()) + " and " + std::to_string(p.dim()) + ", respectively");
  }
  if (c.dtype() != p.dtype()) {
    return sparse_error(std::string(cname) + " and " + pname + " must have the same dtype, but got " +
                        dtype_name(c.dtype()) + " and " + dtype_name(p.dtype()) + ", respectively");
  }
  if (c.dtype() != DType::I32 && c.dtype() != DType::I64) {
    return sparse_error(std::string(cname) + " and " + pname + " dtype must be int32 or int64, but got " + dtype_name(c.dtype()));
  }
  const size_t batch = c.dim() - 1, block = blocked ? 2 : 0;
  if (v.dim() <= batch + block) {
    return sparse_error("values must have dimensionality > sum of batch and block dimensionalities (=" + std::to_string(batch) +
                        " + " + std::to_string(block) + ") but got " + std::to_string(v.dim()));
  }
  const size_t dense = v.dim() - batch - block - 1;
  if (t.shape.size() != batch + 2 + dense) {
    return sparse_error("tensor dimensionality must be sum of batch, base, and dense dimensionalities (=" + std::to_string(batch) +
                        " + 2 + " + std::to_string(dense) + ") but got " + std::to_string(t.shape.size()));
  }
  for (size_t d = 0; d < batch; ++d) {
    if (c.shape()[d] != t.shape[d] || p.shape()[d] != t.shape[d] || v.shape()[d] != t.shape[d]) {
      return sparse_error("batch dimensions of " + std::string(cname) + " " + dims_text(c.shape(), 0, batch) + ", " + pname +
                          " " + dims_text(p.shape(), 0, batch) + " and values " + dims_text(v.shape(), 0, batch) +
                          " must be the tensor's " + dims_text(t.shape, 0, batch));
    }
  }
  int64_t bs[2] = {1, 1};  // the block size
  if (blocked) {
    bs[0] = v.shape()[batch + 1];
    bs[1] = v.shape()[batch + 2];
    if (bs[0] <= 0 || bs[1] <= 0 || t.shape[batch] % bs[0] != 0 || t.shape[batch + 1] % bs[1] != 0) {
      return sparse_error("block size " + dims_text(v.shape(), batch + 1, batch + 3) + " does not divide the shape " +
                          dims_text(t.shape, batch, batch + 2));
    }
  }
  const int64_t n_compressed = t.shape[batch + (rows ? 0 : 1)] / bs[rows ? 0 : 1];
  const int64_t n_plain = t.shape[batch + (rows ? 1 : 0)] / bs[rows ? 1 : 0];
  const int64_t nnz = v.shape()[batch];
  if (c.shape()[batch] - 1 != n_compressed) {  // (shapes are >= 0: no overflow)
    return sparse_error(std::string(cname) + ".shape[-1] must be " + std::to_string(n_compressed + 1) + ", but got " +
                        std::to_string(c.shape()[batch]));
  }
  if (p.shape()[batch] != nnz) {
    return sparse_error(std::string(pname) + ".shape[-1] must be equal to nnz (=" + std::to_string(nnz) +
                        ") as defined by values.shape[" + std::to_string(batch) + "], but got " + std::to_string(p.shape()[batch]));
  }
  for (size_t d = 0; d < dense; ++d) {  // (torch 1.13 leaves a CSR tensor's dense dimensions unchecked; 2.x checks them)
    if (v.shape()[batch + 1 + block + d] != t.shape[batch + 2 + d]) {
      return sparse_error("values' dense dimensions " + dims_text(v.shape(), batch + 1 + block) + " must be the tensor's " +
                          dims_text(t.shape, batch + 2));
    }
  }
  const uint64_t count = static_cast<uint64_t>(c.numel()) + static_cast<uint64_t>(p.numel());
  if (count > *budget) {
    return make_error(ErrorCode::limit_exceeded, "sparse tensor: " + std::to_string(count) +
                                                     " indices to check, more than the file has bytes (an expanded view)");
  }
  *budget -= count;
  int64_t batches = 1;
  for (size_t d = 0; d < batch; ++d) batches *= t.shape[d];
  const IndexReader cr(c), pr(p);
  std::vector<int64_t> idx(batch, 0);
  for (int64_t b = 0; b < batches; ++b) {
    int64_t co = 0, po = 0;  // this batch's first element in each
    for (size_t d = 0; d < batch; ++d) {
      co += idx[d] * cr.stride(d);
      po += idx[d] * pr.stride(d);
    }
    const int64_t cs = cr.stride(batch), ps = pr.stride(batch);
    if (cr.at(co) != 0) return sparse_error("`" + std::string(cname) + "[..., 0] == 0` is not satisfied");
    if (cr.at(co + n_compressed * cs) != nnz) return sparse_error("`" + std::string(cname) + "[..., -1] == nnz` is not satisfied");
    int64_t prev = 0;
    for (int64_t k = 1; k <= n_compressed; ++k) {
      const int64_t next = cr.at(co + k * cs);
      if (next < prev || next - prev > n_plain) {
        return sparse_error("`0 <= " + std::string(cname) + "[..., 1:] - " + cname + "[..., :-1] <= " + (rows ? "ncols" : "nrows") +
                            "` is not satisfied");
      }
      for (int64_t j = prev; j < next; ++j) {  // (prev <= next <= nnz here: steps are checked and the sum is nnz)
        const int64_t i = pr.at(po + j * ps);
        if (i < 0 || i >= n_plain) return sparse_error("`0 <= " + std::string(pname) + " < " + (rows ? "ncols" : "nrows") + "` is not satisfied");
        if (j > prev && i <= pr.at(po + (j - 1) * ps)) {
          return sparse_error("`" + std::string(pname) + "` of a " + (rows ? "row" : "column") + " are not sorted and distinct");
        }
      }
      prev = next;
    }
    for (size_t d = batch; d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return {};
}

// Every sparse tensor of a file; budget: how many index elements may be read in all
// (the file's size: a stored index takes 4 or 8 bytes, so only expanded views reach it).
inline Status check_sparse(const SparseTensor& t, uint64_t* budget) {
  return t.layout == SparseLayout::coo ? check_sparse_coo(t, budget) : check_sparse_compressed(t, budget);
}

}  // namespace detail
}  // namespace ptread
