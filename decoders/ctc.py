"""CTC prefix beam search (no LM, no lexicon): N-best token sequences scored by their CTC posterior.

Offline: `ctc_beam_search(log_probs, lengths, config)` runs the CUDA kernels when `log_probs` is on a GPU
and the C++ CPU reference otherwise. Streaming: `CtcStreamingDecoder` advances caller-owned state tensors
chunk by chunk (`decode_chunk`, or `decode_chunk_batch` for many independent streams in one launch pair)
and `finalize` returns the N-best.

Semantics (the CPU reference in decoders/csrc/ctc_cpu.cpp is the executable spec):
- a beam is a collapsed prefix with log P(ends in blank) and log P(ends in non-blank); repeating the last
  label needs a blank in between; prefixes that become equal are merged (log-add); the best `beam_size`
  survive; on the first decoded frame one slot is reserved for the empty prefix (beam_size > 1);
- offline blank skipping: frames with P(blank) > `blank_skip_threshold` are skipped (>= 1.0 disables);
  a run of skipped frames acts as one certain blank: at the next decoded frame every beam collapses into
  its blank-ending path. Streaming takes an optional per-frame `speech_mask` instead (False = skip);
- `max_seq_len`: a prefix never grows past it. Offline `None` means T (nothing can be cut); streaming
  `None` means `STREAMING_MAX_SEQ_LEN`. `CtcResult.hit_max_seq_len` flags rows where a hypothesis reached it;
- a row with no decoded frame (length 0, or every frame skipped) returns the empty hypothesis, score 0;
  N-best slots without a hypothesis have score -inf and no tokens.
- ties: candidates with exactly equal scores are ranked by a fixed candidate order: stays before
  extensions, lower beam first, and (for equal log-probs) lower token id first, on CPU and CUDA alike.
  Corner cases differ (CUDA orders one beam's extensions by log-prob rank, the CPU by token id; beyond 256
  live candidates CUDA keeps winners in slot order, not rank order), so: exact ties in the final N-best
  may come out in a different order; exact ties at the pruning boundary can keep a different but
  equal-scoring set of prefixes, and from there later scores can differ (seen only on constructed inputs
  such as uniform log-probs). Without exact ties both paths agree to float rounding (tested: 1e-4 abs +
  1e-5 rel; long utterances accumulate float32 error proportional to the score's magnitude).
- token storage: flat (each beam's prefix in its own slot, copied when a beam forks) or paged (`paged=True`:
  fixed-size pages shared between beams by reference count, copied on write; see ctc_common.cuh). Both
  give identical results; paged forks copy a page table instead of a prefix, and `num_pages` can size the
  pool below the worst case to save memory (a hypothesis that needed a page the pool did not have raises).
- CUDA detail: merge pairs are found by 64-bit prefix hashes (a strong mixer; a collision among the
  < beam^2 pairs compared per frame has probability ~1e-17), not by comparing token lists.

State tensors are plain int32 tensors (rows, words) the caller owns; their layout is
decoders/include/ctc_common.cuh. They are device-specific (a CPU state is not a CUDA state).
Each row carries a stamp (magic/version, backend, beam_size, max_seq_len, page_size, num_pages, vocabulary
size, blank_id) written by `create_state` and a 64-bit checksum of the whole row re-sealed by every op that
writes it. Every op checks the stamp, every header field, every live beam's length/last-token/slot words and
the checksum before any kernel reads the row: a foreign state (another config, vocabulary or device) is refused
naming the field and both values, a modified one by the field or as a checksum mismatch. The CPU ops raise at
once (and then touch no row). The CUDA ops check on the GPU to avoid a device->host sync per chunk: a refused
row is skipped (left as it was) by decode_chunk / decode_chunk_batch and the error is raised by `finalize`.
The checksum is an integrity check against accidents and careless edits, not a defence against a forger.

CUDA kernels (decoders/include/ctc_kernels.cuh): a frame-parallel pre-pass ranks each frame's vocabulary,
then one launch per 128-frame tile decodes it, one warp per row (beam <= 32, up to 64 rows) or one block
per row; flat token storage there is rebuilt once per launch from a per-frame (source, token) history.
`BEAMDEC_CTC_KERNEL=block|warp` forces one kernel (A/B); `BEAMDEC_CTC_PAGED_SMEM=1` (paged metadata in
shared memory) is an opt-in of the one-warp kernel. Reproduce the numbers with
`python -m eval.bench.ctc_bench --out runs/bench/ctc_bench.json` on the GPU host.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from decoders import _ext
from decoders.types import Hypothesis, check_prefix_search_options

MAX_BEAM_SIZE = 128
STREAMING_MAX_SEQ_LEN = 1000  # tokens per stream; flat state = 4*(16 + 9*beam) + 2*beam*max_seq_len bytes
_HEADER_WORDS = 16  # mirrors kHeaderWords in ctc_common.cuh
MAX_VOCAB = 65536  # mirrors kMaxVocab: token ids are stored in 16 bits
_STATUS_BAD_VALUE = 1
_STATUS_CAP_HIT = 2
_STATUS_POOL_FULL = 4


@dataclass
class CtcBeamSearchConfig:
    """Configuration of the CTC prefix beam search.

    beam_size: prefixes kept per frame, 1..128.
    blank_id: blank column (0 or V-1 usually; NeMo puts it last, torchaudio first).
    blank_skip_threshold: offline only; frames with P(blank) above it are skipped (>= 1.0 disables).
    nbest: hypotheses returned per row, 1..beam_size.
    max_seq_len: cap on tokens per hypothesis; None: T offline (never cuts), STREAMING_MAX_SEQ_LEN streaming.
    paged: paged token storage (pages of `page_size` tokens shared by reference count, copy on write)
        instead of flat per-beam slots; results are identical.
    page_size: tokens per page (paged only).
    num_pages: physical pages per row (paged only); None = beam * (ceil(max_seq_len / page_size) + 1),
        which can never run out. Fewer save memory; a hypothesis that needed a missing page raises.
    """

    beam_size: int = 10
    blank_id: int = 0
    blank_skip_threshold: float = 0.98
    nbest: int = 1
    max_seq_len: Optional[int] = None
    paged: bool = False
    page_size: int = 16
    num_pages: Optional[int] = None

    def __post_init__(self):
        if not isinstance(self.beam_size, int) or not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            raise ValueError(f"beam_size must be an int in [1, {MAX_BEAM_SIZE}], got {self.beam_size!r}")
        check_prefix_search_options(self.blank_id, self.nbest, self.beam_size, self.blank_skip_threshold)
        if self.max_seq_len is not None and (not isinstance(self.max_seq_len, int) or self.max_seq_len < 1):
            raise ValueError(f"max_seq_len must be None or a positive int, got {self.max_seq_len!r}")
        if not isinstance(self.page_size, int) or not 1 <= self.page_size <= 4096:
            raise ValueError(f"page_size must be an int in [1, 4096], got {self.page_size!r}")
        if self.num_pages is not None and (not isinstance(self.num_pages, int) or self.num_pages < 1):
            raise ValueError(f"num_pages must be None or a positive int, got {self.num_pages!r}")

    def storage_args(self, max_seq_len: int) -> tuple[int, int]:
        """(page_size, num_pages) as the ops take them: (0, 0) for flat storage."""
        if not self.paged:
            return 0, 0
        pages = self.num_pages if self.num_pages is not None else default_num_pages(self.beam_size, max_seq_len,
                                                                                    self.page_size)
        return self.page_size, pages

@dataclass
class CtcResult:
    """N-best per row. tokens[b][n]: token ids (blank-free, collapsed); scores (B, nbest) float32 log
    posteriors (-inf where there is no n-th hypothesis); lengths (B, nbest) int32 token counts;
    hit_max_seq_len (B,) bool: some hypothesis of the row reached max_seq_len.
    page_pool_exhausted (B,) bool: paged storage ran out of pages for some (possibly pruned) hypothesis."""

    tokens: list[list[list[int]]]
    scores: torch.Tensor
    lengths: torch.Tensor
    hit_max_seq_len: torch.Tensor
    page_pool_exhausted: Optional[torch.Tensor] = None

    def hypotheses(self, row: int, tokens=None) -> list[Hypothesis]:
        """The row's N-best; with `tokens` (see `detokenize`) each carries its words."""
        return [
            Hypothesis(tokens=t, words=detokenize(t, tokens).split() if tokens is not None else [], score=float(s))
            for t, s in zip(self.tokens[row], self.scores[row].tolist())
        ]

    def texts(self, tokens, n: int = 0) -> list[str]:
        """The n-th hypothesis of every row as text (`detokenize` with `tokens`)."""
        return [detokenize(row[n], tokens) for row in self.tokens]


def detokenize(ids: Sequence[int], tokens) -> str:
    """Column ids -> text. `tokens`: an object with `decode(column_ids)` (recipes.tokens.TokenSet, or a tokenizer
    whose ids are the columns), or the token table (a sequence of strings, one per column, blank included):
    pieces are joined, sentencepiece's word marker "\u2581" and torchaudio's "|" separate words."""
    if hasattr(tokens, "decode") and not isinstance(tokens, (list, tuple)):
        return str(tokens.decode(list(ids)))
    if isinstance(tokens, (list, tuple)):
        if any(not 0 <= int(i) < len(tokens) for i in ids):
            raise ValueError(f"token ids {list(ids)[:8]} outside the token table of {len(tokens)} entries")
        text = "".join(str(tokens[int(i)]) for i in ids).replace("\u2581", " ").replace("|", " ")
        return " ".join(text.split())
    raise TypeError(f"tokens must be a token table (list of str) or have decode(ids), got {type(tokens).__name__}")


_VALUE_SAMPLE_FRAMES = 64  # frames per row the value checks look at


def log_prob_value_stats(log_probs: torch.Tensor, lengths: torch.Tensor,
                         sample_frames: int = _VALUE_SAMPLE_FRAMES) -> torch.Tensor:
    """The counts `check_log_prob_values` judges, as a (4,) int64 tensor on log_probs' device, without a
    device->host copy: sampled valid frames, those that look like probability rows, those whose argmax is column
    V-1, and those whose argmax is column 0 (from the first `sample_frames` valid frames of each row)."""
    B, T, V = log_probs.shape
    t = min(T, sample_frames)
    if B == 0 or t == 0:
        return torch.zeros(4, dtype=torch.int64, device=log_probs.device)
    x = log_probs[:, :t].float()
    valid = torch.arange(t, device=x.device)[None, :] < lengths.to(x.device)[:, None]  # (B, t)
    # amin >= 0 is all(x >= 0) (NaN fails both) with one read of x and no (B, t, V) temporary
    prob_row = (x.amin(-1) >= 0) & ((x.sum(-1) - 1.0).abs() < 1e-2)
    arg = x.argmax(-1)
    return (torch.stack([valid, prob_row, arg == V - 1, arg == 0]) & valid).flatten(1).sum(1)


def judge_log_prob_value_stats(stats: Sequence[int], vocab_size: int, blank_id: int, name: str = "log_probs",
                               stacklevel: int = 3) -> None:
    """Raise / warn on `log_prob_value_stats` counts (see `check_log_prob_values`)."""
    n, n_prob, n_last, n_first = (int(v) for v in stats)
    V = vocab_size
    if n == 0:
        return
    if n_prob == n:
        raise ValueError(f"{name} look like probabilities (rows are >= 0 and sum to 1), not natural-log "
                         f"posteriors; pass probs.log() or logits.log_softmax(-1)")
    if blank_id == 0 and V > 2 and n >= 16 and n_last > 0.5 * n and n_first < 0.05 * n:
        import warnings

        warnings.warn(f"blank_id=0, but column V-1={V - 1} is the argmax of {100 * n_last / n:.0f}% of the sampled "
                      f"frames and column 0 of {100 * n_first / n:.0f}%: the model looks blank-last (NeMo's "
                      f"convention); pass blank_id={V - 1}", stacklevel=stacklevel + 1)


def check_log_prob_values(log_probs: torch.Tensor, lengths: torch.Tensor, blank_id: int,
                          name: str = "log_probs", sample_frames: int = _VALUE_SAMPLE_FRAMES) -> None:
    """Checks on the values, from the first `sample_frames` valid frames of each row (one small device->host copy):

    - ValueError when they are probabilities, not log-probabilities: every sampled row is >= 0 and sums to 1
      (a normalised log-prob row is <= 0 and sums to 1 only after exp; for V >= 2 the two cannot be confused);
    - a warning (not an error: a constructed input may legitimately look so) when blank_id = 0 but column V-1 is the
      argmax of most sampled frames and column 0 of almost none -- the signature of a NeMo (blank-last) model
      decoded with torchaudio's blank_id=0 (issue 13: the output then has the blank between every token).
    """
    stats = log_prob_value_stats(log_probs, lengths, sample_frames).cpu().tolist()
    judge_log_prob_value_stats(stats, log_probs.shape[2], blank_id, name, stacklevel=3)


def _ops():
    return _ext.ops()


def _register_fakes() -> None:
    """Fake (meta) kernels so the ops work under torch.compile / FakeTensor and pass `opcheck`."""
    lib = "beamdec::"

    def outputs(like: torch.Tensor, rows: int, nbest: int, max_seq_len: int):
        return (
            like.new_empty((rows, nbest, max_seq_len), dtype=torch.int32),
            like.new_empty((rows, nbest), dtype=torch.int32),
            like.new_empty((rows, nbest), dtype=torch.float32),
            like.new_empty((rows,), dtype=torch.int32),
        )

    try:
        @torch.library.register_fake(lib + "ctc_decode_offline")
        def _offline(log_probs, lengths, beam_size, blank_id, blank_skip_threshold, nbest, max_seq_len, page_size,
                     num_pages):
            return outputs(log_probs, log_probs.shape[0], nbest, max_seq_len)

        @torch.library.register_fake(lib + "ctc_decode_offline_packed")
        def _offline_packed(log_probs, lengths, beam_size, blank_id, blank_skip_threshold, nbest, max_seq_len,
                            page_size, num_pages, sample_frames):
            return log_probs.new_empty((packed_words(log_probs.shape[0], nbest, max_seq_len),), dtype=torch.int32)

        @torch.library.register_fake(lib + "ctc_decode_chunk")
        def _chunk(state, log_probs, speech_mask, beam_size, blank_id, max_seq_len, page_size, num_pages):
            return None

        @torch.library.register_fake(lib + "ctc_decode_chunk_batched")
        def _chunk_batched(states, log_probs, speech_mask, beam_size, blank_id, max_seq_len, page_size, num_pages):
            return None

        @torch.library.register_fake(lib + "ctc_finalize")
        def _finalize(state, beam_size, blank_id, vocab_size, nbest, max_seq_len, page_size, num_pages):
            return outputs(state, state.shape[0], nbest, max_seq_len)

        @torch.library.register_fake(lib + "ctc_init_state")
        def _init_state(state, beam_size, blank_id, vocab_size, max_seq_len, page_size, num_pages):
            return None

        @torch.library.register_fake(lib + "ctc_debug_raise")
        def _debug_raise(x, mode):
            return None
    except RuntimeError as err:  # already registered (module reloaded)
        if "already" not in str(err):
            raise


_fakes_registered = False


def load_ops():
    """Build/load the extension (CTC part) and register the fake kernels once; returns torch.ops.beamdec."""
    global _fakes_registered
    ops = _ops()
    if not _fakes_registered:
        _register_fakes()
        _fakes_registered = True
    return ops


def _check_log_probs(log_probs: torch.Tensor, name: str = "log_probs") -> None:
    if not isinstance(log_probs, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor (B, T, V), got {type(log_probs).__name__}")
    if log_probs.dim() != 3:
        raise ValueError(f"{name} must be 3-D (B, T, V), got shape {tuple(log_probs.shape)}")
    if log_probs.dtype not in (torch.float32, torch.float16):
        raise ValueError(f"{name} must be float32 or float16, got {log_probs.dtype}")
    if log_probs.shape[2] < 2:
        raise ValueError(f"{name}: vocabulary size V must be >= 2 (blank + one token), got {log_probs.shape[2]}")
    if log_probs.shape[2] > MAX_VOCAB:
        raise ValueError(f"{name}: vocabulary size V must be <= {MAX_VOCAB} (token ids are stored in 16 bits), "
                         f"got {log_probs.shape[2]}")


PACKED_HEADER_WORDS = 8  # ctc_decode_offline_packed: the checks words before the outputs (csrc/ctc_ops.h)


def packed_words(B: int, nbest: int, max_seq_len: int) -> int:
    """Length of ctc_decode_offline_packed's int32 buffer: [checks | tokens | token lengths | scores | status]."""
    return PACKED_HEADER_WORDS + B * nbest * max_seq_len + 2 * B * nbest + B


def _split_outputs(words, B: int, nbest: int, max_seq_len: int):
    """Views of the four offline outputs laid end to end in one host int32 numpy array: (tokens (B, nbest, L), token
    lengths (B, nbest), scores (B, nbest) float32, status (B,)) -- the layout after ctc_decode_offline_packed's checks
    words. numpy views, not torch ones: this runs on the host after the sync, so it is latency the caller waits for."""
    import numpy as np

    n_tok, n_lb = B * nbest * max_seq_len, B * nbest
    return (words[:n_tok].reshape(B, nbest, max_seq_len), words[n_tok:n_tok + n_lb].reshape(B, nbest),
            words[n_tok + n_lb:n_tok + 2 * n_lb].view(np.float32).reshape(B, nbest), words[n_tok + 2 * n_lb:])


def _packed_words(packed: torch.Tensor, B: int, nbest: int, max_seq_len: int):
    """A (host) ctc_decode_offline_packed buffer as an int32 numpy array (a view), its length checked."""
    words = packed.numpy()
    if words.size != packed_words(B, nbest, max_seq_len):
        raise RuntimeError(f"ctc_decode_offline_packed returned {words.size} words, expected "
                           f"{packed_words(B, nbest, max_seq_len)}")
    return words


def unpack_offline(packed: torch.Tensor, B: int, nbest: int, max_seq_len: int):
    """Views of a (host) ctc_decode_offline_packed buffer: (checks, tokens, token lengths, scores, status)."""
    words = _packed_words(packed, B, nbest, max_seq_len)
    h = PACKED_HEADER_WORDS
    return tuple(torch.from_numpy(x) for x in (words[:h], *_split_outputs(words[h:], B, nbest, max_seq_len)))


def _to_result(tokens: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor, status: torch.Tensor) -> CtcResult:
    """The outputs of an offline decode / finalize as a CtcResult: one device->host copy when they are on the GPU,
    then the status checks (NaN / +inf inputs, lost paged tokens)."""
    if tokens.is_cuda:
        B, nbest, L = tokens.shape
        flat = torch.cat([tokens.reshape(-1), lengths.reshape(-1), scores.reshape(-1).view(torch.int32),
                          status.reshape(-1)]).cpu()
        return _words_result(flat.numpy(), B, nbest, L)
    return _host_result(tokens.numpy(), lengths, scores, status.numpy())


def _words_result(words, B: int, nbest: int, L: int) -> CtcResult:
    """A CtcResult from the four outputs laid end to end in one host int32 array (numpy; `_split_outputs`' layout).
    The tensors it returns are views of `words` (torch.from_numpy: no copy)."""
    tokens, lens, scores, codes = _split_outputs(words, B, nbest, L)
    return _host_result(tokens, torch.from_numpy(lens), torch.from_numpy(scores), codes)


def _host_result(tokens, lengths: torch.Tensor, scores: torch.Tensor, codes) -> CtcResult:
    """tokens (B, nbest, L) and codes (B,): host int32 numpy arrays; lengths (B, nbest) int32 and scores (B, nbest)
    float32: host tensors, returned as they are. This runs on the host after the sync, so it is latency the caller
    waits for: numpy views and one tolist per array rather than tensor ops (B=16 T=50: 95 -> 44 us per call on the
    2-core CI machine, session 27; `python -m eval.bench.ctc_host_convert`)."""
    B, nbest, _ = tokens.shape
    code_list = codes.tolist()
    if any(c & _STATUS_BAD_VALUE for c in code_list):
        rows = [b for b, c in enumerate(code_list) if c & _STATUS_BAD_VALUE]
        raise ValueError(f"log_probs contains NaN or +inf (rows {rows[:8]}); log-probs must be finite or -inf")
    flat = lengths.numpy().reshape(-1).tolist()
    # only the columns some hypothesis uses are converted to Python ints (hypotheses are mostly far shorter than T)
    rows = tokens.reshape(B * nbest, -1)[:, :max(flat, default=0)].tolist()
    out = [[rows[i][:flat[i]] for i in range(b * nbest, (b + 1) * nbest)] for b in range(B)]
    if any(c & _STATUS_POOL_FULL for c in code_list):
        lost = [b for b, c in enumerate(code_list) if c & _STATUS_POOL_FULL and any(-1 in h for h in out[b])]
        if lost:
            raise RuntimeError(f"paged token storage ran out of pages (rows {lost[:8]}): a returned hypothesis "
                               f"lost tokens; raise CtcBeamSearchConfig.num_pages (None = never runs out)")
    return CtcResult(tokens=out, scores=scores, lengths=lengths,
                     hit_max_seq_len=torch.from_numpy((codes & _STATUS_CAP_HIT) != 0),
                     page_pool_exhausted=torch.from_numpy((codes & _STATUS_POOL_FULL) != 0))


def ctc_beam_search(
    log_probs: torch.Tensor,  # (B, T, V) natural-log posteriors, float32/float16
    lengths: torch.Tensor,  # (B,) int, valid frames per row
    config: Optional[CtcBeamSearchConfig] = None,
) -> CtcResult:
    """Offline batched CTC prefix beam search. CUDA kernels for GPU inputs, the CPU reference otherwise.

    The CUDA path is one op (`ctc_decode_offline_packed`) and one device->host copy: the input checks that need the
    values on the device (lengths in [0, T] when lengths are on the GPU; the counts of `check_log_prob_values`) run
    in a kernel of that op and come back in the same copy as the results; a failing check raises before anything
    is returned (the kernels decode lengths clamped to [0, T] and never read past the input, so decoding first is
    safe). On the CPU the checks run before the decode.
    """
    config = config or CtcBeamSearchConfig()
    _check_log_probs(log_probs)
    B, T, V = log_probs.shape
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1 or lengths.shape[0] != B:
        raise ValueError(f"lengths must be a 1-D tensor of B={B} ints, got {getattr(lengths, 'shape', lengths)}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be an integer tensor, got {lengths.dtype}")
    if not config.blank_id < V:
        raise ValueError(f"blank_id={config.blank_id} is outside the vocabulary [0, V={V})")
    on_device = log_probs.is_cuda
    # lengths are checked here unless both live on the GPU (then by the op's input-check kernel, below)
    deferred_lengths = on_device and lengths.is_cuda
    if not deferred_lengths and bool(((lengths < 0) | (lengths > T)).any()):
        raise ValueError(f"lengths must be in [0, T={T}], got {lengths.tolist()}")
    if not on_device:
        check_log_prob_values(log_probs, lengths, config.blank_id)
    # default: never cuts (a prefix has at most T tokens); even, so the kernels copy token slots as whole words
    max_seq_len = config.max_seq_len if config.max_seq_len is not None else max(2, T + (T & 1))
    ops = load_ops()
    args = (config.beam_size, config.blank_id, float(config.blank_skip_threshold), config.nbest, max_seq_len,
            *config.storage_args(max_seq_len))
    if not on_device:
        return _to_result(*ops.ctc_decode_offline(log_probs.contiguous(), lengths, *args))
    if os.environ.get("BEAMDEC_CTC_API") == "unpacked":  # the form before 2026-12-06, for in-process A/B runs
        return _beam_search_unpacked(ops, log_probs, lengths, args, config)
    # one op: the input checks (lengths range from the caller's int32 / int64 values, so a length past 2^31 cannot
    # wrap into range; the value counts of log_prob_value_stats), the decode and the n-best, in one int32 buffer
    given = lengths
    if lengths.dtype not in (torch.int32, torch.int64):
        lengths = lengths.to(torch.int64)
    packed = ops.ctc_decode_offline_packed(log_probs, lengths.to(log_probs.device), *args, _VALUE_SAMPLE_FRAMES)
    return _packed_result(_read_back(packed), B, max_seq_len, given, T, V, config, stacklevel=3)


def _read_back(packed: torch.Tensor) -> torch.Tensor:
    """The call's one device->host copy. BEAMDEC_CTC_READBACK=pinned (opt-in): into a fresh page-locked tensor from
    torch's caching host allocator, asynchronously, then the stream is synchronised (a pageable `.cpu()` copies through
    a driver staging buffer); unset or =pageable: `.cpu()`. The returned tensor is the caller's own either way (the
    result's scores / lengths are views of it). Session 28 (H100, gpu tests passed; in-process A/B): API time within
    the spread of an arm that changes nothing, and every result a caller keeps would hold page-locked memory, so not
    the default."""
    form = os.environ.get("BEAMDEC_CTC_READBACK", "")
    if form not in ("", "pageable", "pinned"):
        raise ValueError(f"BEAMDEC_CTC_READBACK must be one of pageable, pinned (or unset), got '{form}'")
    if form != "pinned":
        return packed.cpu()
    host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True)
    host.copy_(packed, non_blocking=True)
    torch.cuda.current_stream(packed.device).synchronize()
    return host


def _packed_result(packed: torch.Tensor, B: int, L: int, given: torch.Tensor, T: int, V: int,
                   config: CtcBeamSearchConfig, stacklevel: int) -> CtcResult:
    """The packed op's host buffer (its one copy) judged and converted (`_judged_result`)."""
    words = _packed_words(packed, B, config.nbest, L)
    h = PACKED_HEADER_WORDS
    return _judged_result(words[:h].tolist(), words[h:], B, L, given, T, V, config, stacklevel=stacklevel + 1)


def _judged_result(checks: list[int], words, B: int, L: int, given: torch.Tensor, T: int, V: int,
                   config: CtcBeamSearchConfig, stacklevel: int) -> CtcResult:
    """The CUDA call's host side after its one copy: the device-side checks judged ([lengths outside [0, T], then
    the value counts]; raises / warns at the caller `stacklevel` frames up), then the outputs (`words`, host int32
    numpy in `_split_outputs`' layout) converted."""
    if checks[0]:  # the error path reads the lengths themselves
        raise ValueError(f"lengths must be in [0, T={T}], got {given.tolist()}")
    judge_log_prob_value_stats(checks[1:5], V, config.blank_id, stacklevel=stacklevel)
    return _words_result(words, B, config.nbest, L)


def _beam_search_unpacked(ops, log_probs: torch.Tensor, lengths: torch.Tensor, args: tuple,
                          config: CtcBeamSearchConfig) -> CtcResult:
    """The CUDA public call as it was before 2026-12-06 (BEAMDEC_CTC_API=unpacked; kept for in-process A/B runs,
    `eval.bench.ctc_bench --ab-env`): torch ops for the lengths range and the value counts around
    ctc_decode_offline, the outputs concatenated by torch before the one copy. The same results and errors."""
    B, T, V = log_probs.shape
    given = lengths.to(torch.int64)
    bad_len = ((given < 0) | (given > T)).any().view(1).to(torch.int64).to(log_probs.device)
    lens32 = lengths.to(device=log_probs.device, dtype=torch.int32)
    tokens, tok_len, scores, status = ops.ctc_decode_offline(log_probs.contiguous(), lens32, *args)
    words = torch.cat([bad_len, log_prob_value_stats(log_probs, lens32)])
    parts = [words, tokens.reshape(-1), tok_len.reshape(-1), scores.reshape(-1).view(torch.int32), status.reshape(-1)]
    flat = torch.cat([p.to(torch.int32) for p in parts]).cpu().numpy()
    n = words.numel()
    return _judged_result(flat[:n].tolist(), flat[n:], B, tokens.shape[2], given, T, V, config, stacklevel=4)


def default_num_pages(beam_size: int, max_seq_len: int, page_size: int) -> int:
    """Pages per row that paged storage can never exhaust (mirrors ctc::default_num_pages)."""
    return beam_size * (-(-max_seq_len // page_size) + 1)


def state_bytes(beam_size: int, max_seq_len: int, page_size: int = 0, num_pages: int = 0) -> int:
    """Bytes of one stream's state (what create_state allocates per row); page_size 0 = flat storage."""
    # token ids are 16-bit, two per int32 word (ctc_common.cuh)
    if page_size == 0:
        return 4 * (_HEADER_WORDS + 9 * beam_size + (beam_size * max_seq_len + 1) // 2)
    return 4 * (_HEADER_WORDS + 9 * beam_size + 3 * num_pages + (num_pages * page_size + 1) // 2)


class CtcStreamingDecoder:
    """Stateful streaming CTC prefix beam search over caller-owned state tensors.

        dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10))
        state = dec.create_state(batch=1, vocab_size=V, device="cuda")
        for chunk in chunks:                       # (1, chunk_T, V)
            dec.decode_chunk(chunk, state=state)   # no device->host sync
        result = dec.finalize(state)

    Skipping in streaming is the caller's choice through `speech_mask` (B, chunk_T) bool; the config's
    blank_skip_threshold is an offline setting and is ignored here.
    """

    def __init__(self, config: Optional[CtcBeamSearchConfig] = None):
        self.config = config or CtcBeamSearchConfig()
        self.max_seq_len = self.config.max_seq_len or STREAMING_MAX_SEQ_LEN

    @property
    def storage_args(self) -> tuple[int, int]:
        return self.config.storage_args(self.max_seq_len)

    @property
    def state_bytes_per_stream(self) -> int:
        return state_bytes(self.config.beam_size, self.max_seq_len, *self.storage_args)

    def create_state(self, batch: int, vocab_size: int, device: torch.device | str = "cpu") -> "CtcStreamState":
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if vocab_size < 2 or not self.config.blank_id < vocab_size or vocab_size > MAX_VOCAB:
            raise ValueError(f"vocab_size must be in [2, {MAX_VOCAB}] and > blank_id={self.config.blank_id}, "
                             f"got {vocab_size}")
        words = self.state_bytes_per_stream // 4
        # "Nothing decoded yet" (the kernels initialise the beams on the first decoded frame), stamped with
        # this decoder's config, the vocabulary and the backend, and sealed with its checksum: every op checks
        # the stamp, the header and the checksum before it reads a row (ctc_common.cuh).
        tensor = torch.empty((batch, words), dtype=torch.int32, device=device)
        state = CtcStreamState(tensor=tensor, vocab_size=vocab_size)
        self._init_rows(state)
        return state

    def _init_rows(self, state: "CtcStreamState") -> None:
        c = self.config
        load_ops().ctc_init_state(state.tensor, c.beam_size, c.blank_id, state.vocab_size, self.max_seq_len,
                                  *self.storage_args)

    def reset_state(self, state: "CtcStreamState") -> None:
        """Reuse a state's memory for a new utterance (same vocabulary)."""
        self._check_state(state)
        self._init_rows(state)

    def _check_state(self, state: "CtcStreamState", name: str = "state", words: Optional[int] = None) -> None:
        """Shape/dtype checks here, before the op, with the config in the message (the C++ checks name the
        argument too). `words`: the state row's width, when the caller checks many states."""
        if words is None:
            words = self.state_bytes_per_stream // 4
        t = getattr(state, "tensor", None)
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 2 or t.shape[1] != words:
            raise ValueError(f"{name} must be a CtcStreamState from create_state of a decoder with beam_size="
                             f"{self.config.beam_size}, max_seq_len={self.max_seq_len} ((rows, {words}) int32), got "
                             f"{getattr(t, 'dtype', type(state).__name__)} {tuple(getattr(t, 'shape', ()))}")

    def _check_chunk(self, log_probs: torch.Tensor, vocab_size: int) -> None:
        _check_log_probs(log_probs)
        if log_probs.shape[2] != vocab_size:
            raise ValueError(f"log_probs has V={log_probs.shape[2]} but the state was created for {vocab_size}")

    def decode_chunk(
        self,
        log_probs: torch.Tensor,  # (B, chunk_T, V)
        *,
        state: "CtcStreamState",
        speech_mask: Optional[torch.Tensor] = None,  # (B, chunk_T) bool, False = skip the frame
    ) -> None:
        self._check_state(state)
        self._check_chunk(log_probs, state.vocab_size)
        if log_probs.shape[0] != state.tensor.shape[0]:
            raise ValueError(f"log_probs has batch {log_probs.shape[0]} but state has {state.tensor.shape[0]} rows")
        if log_probs.device != state.tensor.device:
            raise ValueError(f"log_probs is on {log_probs.device} but state is on {state.tensor.device}")
        if speech_mask is not None:
            speech_mask = speech_mask.to(device=log_probs.device, dtype=torch.bool)
        c = self.config
        load_ops().ctc_decode_chunk(
            state.tensor, log_probs.contiguous(), speech_mask, c.beam_size, c.blank_id, self.max_seq_len,
            *self.storage_args,
        )

    def decode_chunk_batch(
        self,
        chunks: Sequence[torch.Tensor] | torch.Tensor,  # N x (1, chunk_T, V) or (N, chunk_T, V)
        states: Sequence["CtcStreamState"],
        speech_mask: Optional[torch.Tensor] = None,  # (N, chunk_T)
    ) -> None:
        """Advance N independent single-row streams by one chunk each, in one launch pair per tile per 256 streams."""
        if not isinstance(chunks, torch.Tensor):
            if len(chunks) == 0:
                return
            lengths = {int(x.shape[1]) for x in chunks}
            if len(lengths) != 1:
                raise ValueError(f"chunks must share one chunk length, got {sorted(lengths)}")
            chunks = torch.cat([x if x.dim() == 3 else x.unsqueeze(0) for x in chunks], dim=0)
        if len(states) != chunks.shape[0]:
            raise ValueError(f"states: got {len(states)} states for {chunks.shape[0]} chunks")
        _check_log_probs(chunks, "chunks")
        V = chunks.shape[2]
        seen: dict[int, int] = {}
        for i, s in enumerate(states):
            # the same state twice would decode two streams into one state (the op checks overlap as well)
            key = s.tensor.data_ptr() if isinstance(getattr(s, "tensor", None), torch.Tensor) else id(s)
            if key in seen:
                raise ValueError(f"states: entries {seen[key]} and {i} are the same state; each stream needs its own")
            seen[key] = i
        words, device = self.state_bytes_per_stream // 4, chunks.device
        for s in states:
            self._check_state(s, "states[i]", words)
            if s.tensor.device != device:
                raise ValueError(f"states[i] is on {s.tensor.device} but chunks are on {chunks.device}")
            if s.tensor.shape[0] != 1 or s.vocab_size != V:
                raise ValueError(f"states: each must be a single-row state for V={V}, got rows={s.tensor.shape[0]}, "
                                 f"V={s.vocab_size}")
        if speech_mask is not None:
            speech_mask = speech_mask.to(device=chunks.device, dtype=torch.bool)
        c = self.config
        load_ops().ctc_decode_chunk_batched(
            [s.tensor for s in states], chunks.contiguous(), speech_mask, c.beam_size, c.blank_id, self.max_seq_len,
            *self.storage_args,
        )

    def finalize(self, state: "CtcStreamState") -> CtcResult:
        """N-best of everything decoded so far (the state stays valid; more chunks may follow)."""
        self._check_state(state)
        c = self.config
        outs = load_ops().ctc_finalize(state.tensor, c.beam_size, c.blank_id, state.vocab_size, c.nbest,
                                       self.max_seq_len, *self.storage_args)
        return _to_result(*outs)


@dataclass
class CtcStreamState:
    """A caller-owned streaming state: `tensor` (rows, words) int32 on the decoding device."""

    tensor: torch.Tensor
    vocab_size: int

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * 4

    @property
    def bytes_per_stream(self) -> int:
        return self.tensor.shape[1] * 4
