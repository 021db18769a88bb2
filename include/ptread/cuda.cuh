// ptread — the CUDA headers in one include (from your .cu files; link ptread::cuda):
// upload (cuda/upload.cuh), Linear (cuda/linear.cuh), Embedding and EmbeddingBag
// (cuda/embedding.cuh), the split case (cuda/split.cuh). See docs/api.md, "CUDA".
#pragma once

#include "cuda/common.cuh"
#include "cuda/upload.cuh"
#include "cuda/linear.cuh"
#include "cuda/embedding.cuh"
#include "cuda/split.cuh"
