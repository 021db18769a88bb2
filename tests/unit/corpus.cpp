// Real checkpoints written by other people (../shared/corpus, beside the checkout) against
// what torch found in them (oracle.json). Skipped when the folder is absent: users of the
// library do not have it.
//
// Every container (zip, legacy, tar, TorchScript) and every kind of content (state dicts,
// training checkpoints, whole models): every tensor the oracle lists is read bit for bit under its name, except tensors that this
// version reports as unsupported (quantized ones), which must be listed by unsupported(),
// never dropped. The files torch refuses (refused/, torch's message in its SOURCES.tsv) are
// refused in every load mode, with the error that names why.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace ptread_test;

namespace {

struct Source {
  std::string file;
  std::string container;
};

struct Refused {
  std::string file;
  std::string container;
  std::string torch_says;
};

std::vector<std::vector<std::string>> read_tsv(const std::string& tsv) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(tsv);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, '\t')) cols.push_back(c);
    rows.push_back(std::move(cols));
  }
  return rows;
}

std::vector<Source> read_sources(const std::string& tsv) {
  std::vector<Source> out;
  for (const auto& cols : read_tsv(tsv)) {
    if (cols.size() >= 7) out.push_back({cols[0], cols[6]});
  }
  return out;
}

void check_corpus_file(const std::string& dir, const Source& src, const Json& o) {
  auto ck = ptread::Checkpoint::open(dir + "/files/" + src.file);
  INFO(src.file);
  REQUIRE(ck.ok());
  std::map<std::string, const ptread::QuantizedTensor*> quantized;
  for (const auto& q : ck->quantized()) quantized.emplace(q.name, &q.tensor);
  const Json& tensors = o["tensors"];
  std::set<std::string> expected_names;
  for (const auto& kv : tensors.as_object()) {
    expected_names.insert(kv.first);
    INFO("tensor " << kv.first);
    const std::string& dtype = kv.second["dtype"].as_string();
    if (dtype.rfind("Q:", 0) == 0) {
      // A quantized tensor: the oracle hashes its integer representation.
      auto q = quantized.find(kv.first);
      REQUIRE(q != quantized.end());
      const ptread::Tensor& t = q->second->int_repr;
      const std::string torch_name = dtype.substr(2);  // "torch.qint8"
      ptread::DType want = ptread::DType::U8;
      REQUIRE(ptread::detail::dtype_from_torch_name(torch_name.substr(torch_name.find('.') + 1), &want));
      CHECK(q->second->dtype == want);
      CHECK(shape_str(t.shape()) == shape_str(kv.second["shape"]));
      CHECK(tensor_sha256(t) == kv.second["sha256"].as_string());
      continue;
    }
    const ptread::Tensor* t = ck->find(kv.first);
    REQUIRE(t != nullptr);
    CHECK(std::string(ptread::dtype_name(t->dtype())) == dtype);
    CHECK(shape_str(t->shape()) == shape_str(kv.second["shape"]));
    CHECK(tensor_sha256(*t) == kv.second["sha256"].as_string());
  }
  CHECK(ck->unsupported().empty());
  CHECK(quantized.size() == ck->quantized().size());
  for (const auto& q : ck->quantized()) {
    INFO("extra quantized tensor " << q.name);
    CHECK(expected_names.count(q.name) == 1);
  }
  // Nothing listed that torch does not list.
  for (const auto& nt : ck->tensors()) {
    INFO("extra tensor " << nt.name);
    CHECK(expected_names.count(nt.name) == 1);
  }
}

}  // namespace

TEST_CASE("real-world corpus matches torch's oracle", "[corpus]") {
  const std::string dir = corpus_dir();
  if (!path_exists(dir + "/oracle.json")) {
    WARN("no corpus at " << dir << ": skipped");
    return;
  }
  Json oracle;
  std::string err;
  REQUIRE(read_json_file(dir + "/oracle.json", oracle, &err));
  const auto sources = read_sources(dir + "/SOURCES.tsv");
  REQUIRE(sources.size() >= 20);
  for (const auto& src : sources) {
    const Json* o = oracle.find(src.file);
    REQUIRE(o != nullptr);
    SECTION(src.file) { check_corpus_file(dir, src, *o); }
  }
}

// What ptread answers for the refused files, by their container: hand-made tar files without
// a `tensors` member (torch: "Ran out of input" reading it), and a file that is no
// checkpoint at all ("unpickling stack underflow").
TEST_CASE("corpus files torch refuses are refused, the reason named", "[corpus]") {
  const std::string dir = corpus_dir() + "/refused";
  if (!path_exists(dir + "/SOURCES.tsv")) {
    WARN("no refused corpus at " << dir << ": skipped");
    return;
  }
  std::vector<Refused> files;
  for (const auto& cols : read_tsv(dir + "/SOURCES.tsv")) {
    if (cols.size() >= 8) files.push_back({cols[0], cols[6], cols[7]});
  }
  REQUIRE(files.size() >= 7);
  const std::map<std::string, std::pair<ptread::ErrorCode, std::string>> want = {
      {"tar", {ptread::ErrorCode::record_missing, "the tar archive has no 'tensors' member"}},
      {"other", {ptread::ErrorCode::unknown_format, "not a PyTorch checkpoint"}},
  };
  const ptread::LoadMode modes[] = {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory};
  for (const auto& f : files) {
    INFO(f.file << " (torch 1.13: " << f.torch_says << ")");
    CHECK(!f.torch_says.empty());
    const auto w = want.find(f.container);
    REQUIRE(w != want.end());
    for (const ptread::LoadMode mode : modes) {
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(dir + "/files/" + f.file, mode, &keep);
      REQUIRE(!ck.ok());
      CHECK(ck.code() == w->second.first);
      CHECK(ck.error().message().find(w->second.second) != std::string::npos);
    }
  }
}
