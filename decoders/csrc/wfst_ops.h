// Declarations of the WFST beam search ops (CPU reference and CUDA). Owned by the WFST decoder.
#pragma once
#include <torch/types.h>
