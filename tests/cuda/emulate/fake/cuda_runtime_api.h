// See cuda_runtime.h: the stand-in runtime for CPU-only machines.
#pragma once

#include "cuda_runtime.h"
