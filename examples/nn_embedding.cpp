// The embedding-on-CPU scenario: a model trained and saved on a GPU, served on a CPU.
//   nn_embedding examples/nn_model.pt
// Loads the F16 embedding table and the Linear of examples/nn_model.pt (saved from cuda:0),
// looks up the batch of ids the file carries, runs the Linear, and prints the result beside
// the values torch computed for the same batch (recorded by make_nn_example.py). Exit status
// 0 when every value matches torch within float tolerance.
#include <ptread/ptread.hpp>

#include "beside_torch.hpp"

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s nn_model.pt\n", argv[0]);
    return 2;
  }
  auto ck = ptread::Checkpoint::open(argv[1]);  // mmap: the table is read row by row, never copied
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());
    return 1;
  }
  auto emb = ptread::nn::Embedding::from(*ck, "model_state_dict.emb");
  auto fc = ptread::nn::Linear::from(*ck, "model_state_dict.fc");
  auto ids_t = ck->get("reference.ids");
  auto want_t = ck->get("reference.torch_output");
  if (!emb || !fc || !ids_t || !want_t) {
    std::fprintf(stderr, "%s\n", !emb ? emb.error().what() : !fc ? fc.error().what()
                                 : !ids_t ? ids_t.error().what() : want_t.error().what());
    return 1;
  }
  std::printf("emb: %zu x %zu %s (saved from %s), fc: %zu -> %zu\n", emb->num_embeddings(), emb->dim(),
              ptread::dtype_name(emb->weight().dtype()), emb->weight().device().c_str(), fc->in_features(),
              fc->out_features());

  const int64_t* ids = ids_t->data<int64_t>().value();
  const size_t n = static_cast<size_t>(ids_t->numel());
  std::vector<float> hidden(n * emb->dim()), out(n * fc->out_features());
  if (auto st = emb->forward(ids, n, hidden.data()); !st) {
    std::fprintf(stderr, "%s\n", st.error().what());
    return 1;
  }
  if (auto st = fc->forward(hidden.data(), n, out.data()); !st) {
    std::fprintf(stderr, "%s\n", st.error().what());
    return 1;
  }

  const std::vector<float> want = want_t->to_float32().value();
  const bool ok = print_beside_torch(ids, n, fc->out_features(), out, want);
  return ok ? 0 : 1;
}
