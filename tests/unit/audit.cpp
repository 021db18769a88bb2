// ptread::audit: the globals a checkpoint's pickles name, counted, and marked as
// torch.load(weights_only=True) treats them (torch/_weights_only_unpickler.py,
// _get_allowed_globals of torch 2.x): torch-written files, whole models, metadata, and a
// pickle that would run a shell command under torch.load(weights_only=False), which ptread
// opens inertly.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"
#include "support/zip_writer.hpp"

#include <map>

using namespace ptread_test;

namespace {

std::map<std::string, ptread::GlobalUse> audit_of(const ptread::Checkpoint& ck) {
  std::map<std::string, ptread::GlobalUse> out;
  for (const auto& g : ptread::audit(ck).globals) out.emplace(g.module + "." + g.name, g);
  return out;
}

}  // namespace

TEST_CASE("audit: a torch-written state dict names only allowed globals", "[audit]") {
  auto ck = ptread::Checkpoint::open(fixture_dir() + "/proto2.pt");
  REQUIRE(ck.ok());
  const auto r = ptread::audit(*ck);
  CHECK(r.format == "zip");
  CHECK(r.refused() == 0);
  const auto g = audit_of(*ck);
  REQUIRE(g.count("torch._utils._rebuild_tensor_v2") == 1);
  CHECK(g.at("torch._utils._rebuild_tensor_v2").allowed);
  CHECK(g.at("collections.OrderedDict").allowed);
  CHECK(g.count("torch.FloatStorage") == 1);
}

TEST_CASE("audit: whole models and metadata name globals weights_only refuses", "[audit]") {
  auto model = ptread::Checkpoint::open(fixture_dir() + "/legacy_model.pt");
  REQUIRE(model.ok());
  auto g = audit_of(*model);
  REQUIRE(g.count("fixture_models.Net") == 1);
  CHECK_FALSE(g.at("fixture_models.Net").allowed);
  CHECK_FALSE(g.at("torch.nn.modules.linear.Linear").allowed);
  CHECK(g.at("torch._utils._rebuild_parameter").allowed);
  CHECK(ptread::audit(*model).refused() >= 4);

  auto meta = ptread::Checkpoint::open(fixture_dir() + "/meta.pt");
  REQUIRE(meta.ok());
  g = audit_of(*meta);
  CHECK_FALSE(g.at("argparse.Namespace").allowed);
  CHECK_FALSE(g.at("numpy.core.multiarray._reconstruct").allowed);
  CHECK(g.at("torch.device").allowed);
  CHECK(g.at("torch.float16").allowed);
  CHECK(g.at("collections.Counter").allowed);
  CHECK(g.at("_codecs.encode").allowed);
}

TEST_CASE("audit: a pickle that would run os.system is opened inertly and reported", "[audit]") {
  // {'w': os.system('echo pwned')} as protocol 2, in an archive torch.load would accept.
  const char bytes[] = "\x80\x02}q\x00X\x01\x00\x00\x00wq\x01" "cos\nsystem\nq\x02X\x0a\x00\x00\x00" "echo pwnedq\x03\x85q\x04Rq\x05s.";
  const std::string pkl(bytes, sizeof bytes - 1);
  ZipWriter w;
  w.add("archive/data.pkl", std::vector<uint8_t>(pkl.begin(), pkl.end()));
  w.add("archive/version", std::vector<uint8_t>{'3', '\n'});
  const std::vector<uint8_t> file = w.build().flat();
  auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
  INFO((ck.ok() ? std::string() : ck.error().str()));
  REQUIRE(ck.ok());
  CHECK(ck->tensors().empty());
  CHECK(ck->root()["w"].class_name() == "os.system");  // recorded, never called
  const auto g = audit_of(*ck);
  REQUIRE(g.size() == 1);
  CHECK(g.at("os.system").count == 1);
  CHECK_FALSE(g.at("os.system").allowed);
  CHECK(ptread::audit(*ck).refused() == 1);
}

TEST_CASE("audit: TorchScript archives name __torch__ classes, which torch.jit.load resolves", "[audit]") {
  auto ck = ptread::Checkpoint::open(fixture_dir() + "/ts_trace.pt");
  REQUIRE(ck.ok());
  const auto r = ptread::audit(*ck);
  CHECK(r.format == "torchscript");
  CHECK(r.refused() == 0);
  bool script_class = false;
  for (const auto& g : r.globals) script_class = script_class || g.module.rfind("__torch__", 0) == 0;
  CHECK(script_class);
}
