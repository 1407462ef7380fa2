// The one registration file of the `beamdec` extension: op schemas first, then per-backend impls.
// Each decoder owns its section; sections are compiled only when the loader enables the component
// (BEAMDEC_WITH_CTC / BEAMDEC_WITH_WFST) so a component can be built and tested on its own.
#include <torch/library.h>

#ifdef BEAMDEC_WITH_CTC
#include "ctc_ops.h"
#endif
#ifdef BEAMDEC_WITH_WFST
#include "wfst_ops.h"
#endif

TORCH_LIBRARY(beamdec, m) {
#ifdef BEAMDEC_WITH_CTC
  // ---- CTC prefix beam search: schemas ----
#endif
#ifdef BEAMDEC_WITH_WFST
  // ---- WFST beam search: schemas ----
#endif
}

TORCH_LIBRARY_IMPL(beamdec, CPU, m) {
#ifdef BEAMDEC_WITH_CTC
  // ---- CTC prefix beam search: CPU reference ----
#endif
#ifdef BEAMDEC_WITH_WFST
  // ---- WFST beam search: CPU reference ----
#endif
}

#ifdef BEAMDEC_WITH_CUDA
TORCH_LIBRARY_IMPL(beamdec, CUDA, m) {
#ifdef BEAMDEC_WITH_CTC
  // ---- CTC prefix beam search: CUDA ----
#endif
#ifdef BEAMDEC_WITH_WFST
  // ---- WFST beam search: CUDA ----
#endif
}
#endif
