// Layouts and entries ptread names instead of reading: the TorchScript archive layout of
// torch 1.0-1.2 (model.json + tensors/), and tensors without data (meta tensors), which are
// listed by unsupported() with the reason, never dropped.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"
#include "support/zip_writer.hpp"

using namespace ptread_test;

namespace {
std::vector<uint8_t> bytes_of(const char* s, size_t n) { return std::vector<uint8_t>(s, s + n); }
}  // namespace

TEST_CASE("the torch 1.0-1.2 TorchScript layout is named in its error", "[layouts]") {
  ZipWriter w;
  const char json[] = "{\"protoVersion\": \"2\", \"mainModule\": {\"name\": \"Net\"}}";
  w.add("net/model.json", bytes_of(json, sizeof json - 1));
  w.add("net/tensors/0", std::vector<uint8_t>(16, 0));
  const std::vector<uint8_t> file = w.build().flat();
  auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
  REQUIRE_FALSE(ck.ok());
  CHECK(ck.error().code() == ptread::ErrorCode::unsupported_format);
  CHECK(ck.error().str().find("1.0-1.2") != std::string::npos);
  CHECK(ck.error().str().find("model.json") != std::string::npos);
}

TEST_CASE("a meta tensor (no data) is listed as unsupported with its reason", "[layouts]") {
  // {'m': torch._utils._rebuild_meta_tensor_no_storage(torch.float32, (2,), (1,), False),
  //  'w': <none>}
  const char pkl[] = "\x80\x02}X\x01\x00\x00\x00m" "ctorch._utils\n_rebuild_meta_tensor_no_storage\n"
                     "(ctorch\nfloat32\nK\x02\x85K\x01\x85\x89tRs" "X\x01\x00\x00\x00wNs.";
  ZipWriter w;
  w.add("archive/data.pkl", bytes_of(pkl, sizeof pkl - 1));
  const std::vector<uint8_t> file = w.build().flat();
  auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
  INFO((ck.ok() ? std::string() : ck.error().str()));
  REQUIRE(ck.ok());
  CHECK(ck->tensors().empty());
  REQUIRE(ck->unsupported().size() == 1);
  CHECK(ck->unsupported()[0].name == "m");
  CHECK(ck->unsupported()[0].reason.find("meta tensor") != std::string::npos);
  CHECK(ck->root()["m"].kind() == ptread::ValueKind::unsupported);
  CHECK(ck->root()["m"].unsupported_reason() == ck->unsupported()[0].reason);
  CHECK(ck->root()["w"].unsupported_reason().empty());  // (None: not an unsupported entry)
}
