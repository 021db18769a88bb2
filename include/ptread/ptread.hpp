// ptread — read PyTorch checkpoints in C++ without LibTorch or Python.
//
// One include for the core: containers, pickle, dtypes, tensors, Checkpoint, the writers
// (save_pt, save_safetensors), and the nn layers' portable CPU path (Embedding,
// EmbeddingBag, Linear).
// Optional backends have their own headers (nn/openblas.hpp, cuda/*.cuh).
// Documentation: README.md and docs/. License: MIT.
#pragma once

#include "config.hpp"
#include "error.hpp"
#include "limits.hpp"
#include "dtype.hpp"
#include "io.hpp"
#include "tensor.hpp"
#include "value.hpp"
#include "checkpoint.hpp"
#include "quantized.hpp"
#include "audit.hpp"
#include "save.hpp"
#include "nn/embedding.hpp"
#include "nn/linear.hpp"
