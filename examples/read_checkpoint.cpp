// Open a checkpoint, list its tensors, read metadata and one tensor's values.
//   read_checkpoint examples/model.pt
#include <ptread/ptread.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CHECKPOINT\n", argv[0]);
    return 2;
  }
  auto ck = ptread::Checkpoint::open(argv[1]);  // mmap: nothing but the pickle is read yet
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());  // "[ptread.E106] ..."
    return 1;
  }
  std::printf("format %s, %zu tensors\n", ck->format_name(), ck->tensors().size());
  for (const auto& t : ck->tensors()) {
    std::printf("  %-40s %-5s %s numel=%lld\n", t.name.c_str(), ptread::dtype_name(t.tensor.dtype()),
                t.tensor.device().c_str(), static_cast<long long>(t.tensor.numel()));
  }

  // Metadata through the object tree; typed accessors say what they found on a mismatch.
  ptread::Value root = ck->root();
  if (auto epoch = root["epoch"].as_int()) std::printf("epoch %lld\n", static_cast<long long>(*epoch));
  if (auto lr = root["args"]["lr"].as_float()) std::printf("lr %g\n", *lr);

  // A tensor's values as float, whatever its dtype and strides.
  if (const ptread::Tensor* w = ck->find("model_state_dict.4.bias")) {
    auto values = w->to_float32();
    if (values) {
      std::printf("model_state_dict.4.bias[:3] = %g %g %g\n", (*values)[0], (*values)[1], (*values)[2]);
    }
  }
  return 0;
}
