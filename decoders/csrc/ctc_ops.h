// Declarations of the CTC prefix beam search ops (CPU reference and CUDA). Owned by the CTC decoder.
#pragma once
#include <torch/types.h>
