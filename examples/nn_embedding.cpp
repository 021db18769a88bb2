// The embedding-on-CPU scenario: a model trained and saved on a GPU, served on a CPU.
//   nn_embedding examples/nn_model.pt
// Loads the F16 embedding table and the Linear of examples/nn_model.pt (saved from cuda:0),
// looks up the batch of ids the file carries, runs the Linear, and prints the result beside
// the values torch computed for the same batch (recorded by make_nn_example.py). Exit status
// 0 when every value matches torch within float tolerance.
#include <ptread/ptread.hpp>

#include <cmath>
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
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    std::printf("id %4lld:", static_cast<long long>(ids[i]));
    for (size_t o = 0; o < fc->out_features(); ++o) {
      const size_t k = i * fc->out_features() + o;
      std::printf("  %+.6f (torch %+.6f)", static_cast<double>(out[k]), static_cast<double>(want[k]));
      worst = std::fmax(worst, std::fabs(static_cast<double>(out[k]) - want[k]));
    }
    std::printf("\n");
  }
  const bool ok = want.size() == out.size() && worst <= 1e-5;
  std::printf("max |ptread - torch| = %.3g: %s\n", worst, ok ? "match torch" : "MISMATCH");
  return ok ? 0 : 1;
}
