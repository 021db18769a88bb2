// Quantized and sparse tensors written by real torch (tests/fixtures/generate.py:
// quantized.pt, sparse.pt): the typed entries of Checkpoint::quantized() and sparse() hold
// what torch.load gives: int_repr(), qscheme and parameters, dequantize() bit for bit, and
// the index and value tensors of sparse layouts.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <map>

using namespace ptread_test;

namespace {

void check_tensor(const ptread::Tensor& t, const Json& e, const std::string& part) {
  INFO("part " << part);
  CHECK(std::string(ptread::dtype_name(t.dtype())) == e[part + "_dtype"].as_string());
  CHECK(shape_str(t.shape()) == shape_str(e[part + "_shape"]));
  CHECK(tensor_sha256(t) == e[part + "_sha256"].as_string());
}

void check_quantized(const ptread::QuantizedTensor& q, const Json& e) {
  CHECK(std::string(ptread::dtype_name(q.dtype)) == e["dtype"].as_string());
  CHECK(shape_str(q.shape) == shape_str(e["shape"]));
  CHECK(std::string(ptread::qscheme_name(q.qscheme)) == e["qscheme"].as_string());
  check_tensor(q.int_repr, e, "int_repr");
  if (q.dtype != ptread::DType::QUINT4X2) {  // packed int_repr has its own 1-d layout
    CHECK(shape_str(q.int_repr.strides()) == shape_str(e["strides"]));
    CHECK(q.int_repr.storage_offset() == e["storage_offset"].as_int());
  }
  if (q.per_channel()) {
    CHECK(q.axis == e["axis"].as_int());
    auto scales = q.scales.to_float32();
    REQUIRE(scales.ok());
    const Json& s = e["scales"];
    REQUIRE(scales->size() == s.size());
    std::vector<double> sd(s.size());
    REQUIRE(q.scales.copy_to(sd.data(), sd.size() * sizeof(double), ptread::DType::F64).ok());
    std::vector<double> zd(s.size());
    REQUIRE(q.zero_points.copy_to(zd.data(), zd.size() * sizeof(double), ptread::DType::F64).ok());
    for (size_t k = 0; k < s.size(); ++k) {
      CHECK(sd[k] == s[k].as_double());
      CHECK(zd[k] == e["zero_points"][k].as_double());
    }
  } else {
    CHECK(q.scale == e["scale"].as_double());
    CHECK(q.zero_point == e["zero_point"].as_int());
  }
  auto d = q.dequantize();
  REQUIRE(d.ok());
  CHECK(sha256_hex(d->data(), d->size() * sizeof(float)) == e["dequantized_sha256"].as_string());
  // The wrong output size is an error, not a write past the buffer.
  std::vector<float> small(d->size() > 0 ? d->size() - 1 : 0);
  CHECK(q.dequantize(small.data(), small.size()).code() == ptread::ErrorCode::invalid_argument);
}

// flag_saved: the file holds COO's is_coalesced (torch >= 2.1 pickles it; 1.13 does not,
// and its torch.load reports False).
void check_sparse(const ptread::SparseTensor& s, const Json& e, bool flag_saved = false) {
  CHECK(std::string(ptread::sparse_layout_name(s.layout)) == e["layout"].as_string());
  CHECK(shape_str(s.shape) == shape_str(e["shape"]));
  CHECK(std::string(ptread::dtype_name(s.dtype())) == e["dtype"].as_string());
  check_tensor(s.values, e, "values");
  if (s.layout == ptread::SparseLayout::coo) {
    check_tensor(s.indices, e, "indices");
    CHECK(s.indices.shape()[0] == e["sparse_dim"].as_int());
    if (flag_saved) {
      CHECK(s.coalesced == (e["is_coalesced"].as_bool() ? 1 : 0));
    } else if (!e["is_coalesced"].as_bool()) {
      CHECK(s.coalesced != 1);
    }
  } else if (e.contains("compressed_indices_sha256")) {  // csc, bsr, bsc (gen_torch2.py)
    check_tensor(s.compressed_indices, e, "compressed_indices");
    check_tensor(s.plain_indices, e, "plain_indices");
  } else {
    check_tensor(s.compressed_indices, e, "crow_indices");
    check_tensor(s.plain_indices, e, "col_indices");
  }
}

}  // namespace

TEST_CASE("quantized tensors: int_repr, parameters and dequantize() as torch gives them", "[quantized]") {
  const Json& exp = expected_json()["files"]["quantized.pt"];
  const Json& list = exp["quantized"];
  REQUIRE(list.size() >= 6);
  for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
    std::vector<unsigned char> keep;
    auto ck = open_in_mode(fixture_dir() + "/quantized.pt", mode, &keep);
    REQUIRE(ck.ok());
    REQUIRE(ck->quantized().size() == list.size());
    CHECK(ck->unsupported().empty());
    for (size_t k = 0; k < list.size(); ++k) {
      const auto& q = ck->quantized()[k];
      INFO("quantized " << q.name << " in mode " << ptread::load_mode_name(mode));
      CHECK(q.name == list[k]["name"].as_string());
      check_quantized(q.tensor, list[k]);
      // The same entry through the object tree.
      auto v = ck->root()[std::string_view(q.name)].as_quantized();
      REQUIRE(v.ok());
      CHECK(v->int_repr.storage() == q.tensor.int_repr.storage());
    }
  }
}

TEST_CASE("sparse tensors: layout, shape, index and value tensors as torch gives them", "[quantized]") {
  const Json& exp = expected_json()["files"]["sparse.pt"];
  const Json& list = exp["sparse"];
  REQUIRE(list.size() >= 4);
  auto ck = ptread::Checkpoint::open(fixture_dir() + "/sparse.pt");
  REQUIRE(ck.ok());
  REQUIRE(ck->sparse().size() == list.size());
  CHECK(ck->unsupported().empty());
  for (size_t k = 0; k < list.size(); ++k) {
    const auto& s = ck->sparse()[k];
    INFO("sparse " << s.name);
    CHECK(s.name == list[k]["name"].as_string());
    check_sparse(s.tensor, list[k]);
    CHECK(ck->root()[std::string_view(s.name)].as_sparse().ok());
    CHECK(ck->root()[std::string_view(s.name)].as_tensor().code() != ptread::ErrorCode::ok);
  }
}

// torch 2.x's sparse tensors (tests/fixtures/gen_torch2.py: t2_sparse.pt, written by torch
// 2.x, which pickles COO's is_coalesced and rebuilds every compressed layout through
// _rebuild_sparse_tensor): COO coalesced, uncoalesced and hybrid, CSR, CSC, BSR, BSC.
TEST_CASE("torch 2.x's sparse layouts: parts and the coalesced flag as torch 2.x gives them", "[quantized][torch2]") {
  const std::string dir = torch2_dir();
  const Json& list = cached_json(dir + "/expected.json")["files"]["t2_sparse.pt"]["sparse"];
  REQUIRE(list.size() == 7);
  for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
    std::vector<unsigned char> keep;
    auto ck = open_in_mode(dir + "/t2_sparse.pt", mode, &keep);
    REQUIRE(ck.ok());
    REQUIRE(ck->sparse().size() == list.size());
    CHECK(ck->unsupported().empty());
    std::map<std::string, int> layouts;
    for (size_t k = 0; k < list.size(); ++k) {
      const auto& s = ck->sparse()[k];
      INFO("sparse " << s.name << " in mode " << ptread::load_mode_name(mode));
      CHECK(s.name == list[k]["name"].as_string());
      check_sparse(s.tensor, list[k], /*flag_saved=*/true);
      ++layouts[list[k]["layout"].as_string()];
    }
    CHECK(layouts == std::map<std::string, int>{{"coo", 3}, {"csr", 1}, {"csc", 1}, {"bsr", 1}, {"bsc", 1}});
  }
}
