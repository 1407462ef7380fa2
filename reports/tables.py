"""Result rows (`reports.schema.ResultRow`) -> markdown tables.

Pure functions over typed rows: a table can be regenerated from run directories alone, on any machine.
- `results_table`: one line per decoder (per params group for benchmark rows); per dataset WER %, S/D/I,
  decoder-only RTFx and memory (the CUDA allocator peak on a GPU, the host RSS rise during decoding on a CPU).
  The utterance count of every dataset is stated; rows from several runs are labelled by what differs between
  the runs (decoder config, params, batch size, hardware), never by the run's timestamp.
- `side_by_side_table`: ours against a competitor measured in the same run (rows naming each other in
  `run_mate`), one line per group of grouping coordinates, with the speed ratio.
- `unavailable_table`, `environment_summary`, `markdown_report` (all of the above; what `reports.cli` prints).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from reports.schema import ResultRow, load_rows

MIB = 2.0**20
# This project's decoders: the "ours" side of a run-mate pair when the report picks the orientation itself.
OURS = ("wfst", "ctc_beam")
_ROW_FIELDS = set(ResultRow.__dataclass_fields__)


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------


def load_results(paths: Iterable[str | Path]) -> list[ResultRow]:
    """Rows of results.jsonl files, or of every results.jsonl under the given directories (recursively)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.rglob("results.jsonl"))
            if not found:
                raise FileNotFoundError(f"no results.jsonl under {p}")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"results file or run directory not found: {p}")
    rows: list[ResultRow] = []
    for f in files:
        rows += load_rows(f)
    return rows


def as_rows(rows: Iterable[Any]) -> list[ResultRow]:
    """ResultRows as they are; dicts (a producer's in-memory rows) through the strict schema constructor."""
    return [r if isinstance(r, ResultRow) else ResultRow.from_dict(r) for r in rows]


def ok_rows(rows: Iterable[Any]) -> list[ResultRow]:
    return [r for r in as_rows(rows) if r.ok]


def memory_mib(row: ResultRow) -> Optional[float]:
    """For a decoder on a GPU: the device memory it holds (cudaMemGetInfo delta from before it was built, which
    sees every allocator) when measured, else the torch allocator peak; the host RSS rise during decoding
    otherwise."""
    if row.device.startswith("cuda") and row.cuda_device_used_bytes is not None:
        return row.cuda_device_used_bytes / MIB
    if row.device.startswith("cuda") and row.cuda_peak_bytes is not None:
        return row.cuda_peak_bytes / MIB
    return None if row.rss_increase_bytes is None else row.rss_increase_bytes / MIB


def results_frame(rows: Sequence[Any]):
    """Long pandas table (one line per successful row): notebooks, and `reports.cli --format csv`."""
    import pandas as pd

    recs = []
    for r in ok_rows(rows):
        flat = {k: v for k, v in r.to_dict().items() if not isinstance(v, dict)}  # every scalar field of the row
        recs.append({**flat, "label": r.label, "wer_pct": None if r.wer is None else 100.0 * r.wer,
                     "cer_pct": None if r.cer is None else 100.0 * r.cer,
                     "memory_mib": memory_mib(r), **{f"param.{k}": v for k, v in r.params.items()}})
    return pd.DataFrame.from_records(recs)


# ---------------------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------------------


def _fmt_rtfx(v: Optional[float]) -> str:
    if v is None or math.isnan(v):
        return "–"
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _fmt(v: Optional[float], spec: str) -> str:
    return "–" if v is None or math.isnan(v) else format(v, spec)


def _wer_pct(r: ResultRow) -> str:
    return "n/a" if r.wer is None else f"{100.0 * r.wer:.2f}"


def _ci_text(r: ResultRow) -> str:
    """The WER's bootstrap interval in points: "[1.70, 2.35]"."""
    ci = r.wer_ci
    return "–" if "low" not in ci else f"[{100 * ci['low']:.2f}, {100 * ci['high']:.2f}]"


def _delta_text(r: ResultRow) -> str:
    """The paired WER difference to the reference decoder in points with its interval: "-0.37 [-0.61, -0.12]";
    "ref" on the reference's own line."""
    ci = r.wer_ci
    if "delta" not in ci:
        return "–"
    return f"{100 * ci['delta']:+.2f} [{100 * ci['delta_low']:+.2f}, {100 * ci['delta_high']:+.2f}]"


def _cer_pct(r: ResultRow) -> str:
    return "–" if r.cer is None else f"{100.0 * r.cer:.2f}"


def _value(v: Any) -> str:
    """A config value in a label: 8.0 -> "8", lists compact, strings bare, absent "–"."""
    if v is None:
        return "–"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    return str(v)


def _cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], body: Sequence[Sequence[str]], n_text: int) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * n_text + ["---:"] * (len(header) - n_text)) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in cells) + " |" for cells in body]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Row labels: what differs between runs
# ---------------------------------------------------------------------------------------------------------

GroupKey = tuple  # (experiment, run, decoder, params_label)
_TIMESTAMP = re.compile(r"^\d{8}-\d{6}(-\d+)?$")  # eval.results.timestamp_run_name: says nothing about a run


def _group_key(r: ResultRow) -> GroupKey:
    return (r.experiment, r.run, r.decoder, r.params_label)


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _descriptor(r: ResultRow) -> dict:
    """Everything that can tell two runs of one decoder apart, most telling first."""
    d = {k: _value(v) for k, v in _flatten(r.decoder_config).items()}
    d.update({k: _value(v) for k, v in r.params.items()})
    d["batch_size"] = str(r.batch_size)
    if r.boost_value is not None:
        d["boost"] = _value(r.boost_value)
    d["boundary"] = r.boundary
    d["hardware"] = str(r.hardware_key)
    d["commit"] = str(r.environment.get("git_commit"))[:10]
    return d


def row_labels(rows: Sequence[ResultRow], max_keys: int = 4) -> dict[GroupKey, str]:
    """A label per (run, decoder, params) group. Within one run the label is the decoder (and its params); when
    several runs hold the same decoder, each is suffixed with the settings that differ between them, e.g.
    `wfst (search_beam=8)` against `wfst (search_beam=17)`, and only runs identical in every setting fall back
    to `(repeat N)`."""
    groups: dict[GroupKey, ResultRow] = {}
    for r in rows:
        groups.setdefault(_group_key(r), r)
    by_label: dict[str, list[GroupKey]] = {}
    for key, r in groups.items():
        by_label.setdefault(r.label, []).append(key)
    labels = {}
    for base, keys in by_label.items():
        if len(keys) == 1:
            labels[keys[0]] = base
            continue
        descs = [_descriptor(groups[k]) for k in keys]
        names = list(dict.fromkeys(n for d in descs for n in d))
        differ = [n for n in names if len({d.get(n) for d in descs}) > 1]
        runs = [groups[k].run for k in keys]
        named = len(set(runs)) == len(runs) and not any(_TIMESTAMP.match(r) for r in runs)
        for i, (k, d) in enumerate(zip(keys, descs)):
            if differ:
                shown = ", ".join(f"{n}={d.get(n, '–')}" for n in differ[:max_keys])
                labels[k] = f"{base} ({shown}{', …' if len(differ) > max_keys else ''})"
            elif named:  # e.g. sweep jobs over data.* keys: their run directories are named by their overrides
                labels[k] = f"{base} ({groups[k].run})"
            else:
                labels[k] = f"{base} (repeat {i + 1})"
    # two groups identical in every descriptor but one beyond max_keys, or repeats: keep labels unique
    seen: dict[str, int] = {}
    for k in list(labels):
        n = seen.get(labels[k], 0)
        seen[labels[k]] = n + 1
        if n:
            labels[k] = f"{labels[k]} #{n + 1}"
    return labels


# ---------------------------------------------------------------------------------------------------------
# The results table
# ---------------------------------------------------------------------------------------------------------


def utterance_counts(rows: Sequence[ResultRow]) -> dict[str, list[int]]:
    """Distinct utterance counts per dataset (one entry when every row of the dataset decoded the same set)."""
    out: dict[str, list[int]] = {}
    for r in ok_rows(rows):
        counts = out.setdefault(str(r.dataset), [])
        if r.utterances not in counts:
            counts.append(r.utterances)
    return out


def results_table(rows: Sequence[Any], datasets: Optional[Sequence[str]] = None, include_all: bool = False) -> str:
    """Markdown: one line per decoder group (first-seen order), WER % / S/D/I / RTFx / memory per dataset. The
    utterance count of each dataset is stated beneath; where rows of one dataset differ in it (runs on different
    subsets), a `<dataset> utts` column gives it per line."""
    rows = ok_rows(rows)
    if not rows:
        return "(no successful results)"
    if datasets is None:
        datasets = [d for d in dict.fromkeys(str(r.dataset) for r in rows) if include_all or d != "all"] or ["all"]
    counts = utterance_counts(rows)
    mixed = {d for d in datasets if len(counts.get(d, [])) > 1}
    labels = row_labels(rows)
    cell: dict[tuple[GroupKey, str], ResultRow] = {}
    for r in rows:
        cell.setdefault((_group_key(r), str(r.dataset)), r)
    with_cer = any(r.cer is not None for r in rows)  # rows written before CER was recorded have none
    with_ci = any("low" in r.wer_ci for r in rows)
    references = sorted({r.wer_ci["reference"] for r in rows if "reference" in r.wer_ci})
    with_delta = len(references) == 1
    extra = [with_ci, with_delta]
    header = ["decoder", "device"]
    for d in datasets:
        header += ([f"{d} utts"] if d in mixed else []) + [f"{d} WER %"] + ([f"{d} 95 % CI"] if with_ci else []) + (
            [f"{d} Δ vs {references[0]}"] if with_delta else []) + ([f"{d} CER %"] if with_cer else []) + [
            f"{d} S/D/I", f"{d} RTFx", f"{d} mem MiB"]
    body = []
    for key, label in labels.items():
        first = next(r for (k, _), r in cell.items() if k == key)
        cells = [label, first.device]
        for d in datasets:
            r = cell.get((key, d))
            if r is None:
                cells += ["–"] * (4 + (d in mixed) + with_cer + sum(extra))
                continue
            sdi = "–" if r.wer is None else f"{r.substitutions}/{r.deletions}/{r.insertions}"
            delta = "ref" if with_delta and r.decoder == references[0] else _delta_text(r)
            cells += ([str(r.utterances)] if d in mixed else []) + [_wer_pct(r)] + (
                [_ci_text(r)] if with_ci else []) + ([delta] if with_delta else []) + (
                [_cer_pct(r)] if with_cer else []) + [sdi, _fmt_rtfx(r.rtfx_decoder), _fmt(memory_mib(r), ".1f")]
        body.append(cells)
    table = _table(header, body, n_text=2)
    said = [f"{d} {'/'.join(map(str, counts[d]))}" for d in datasets if d in counts]
    note = "Utterances: " + ", ".join(said) + "."
    if with_ci:
        n = next(r.wer_ci["n_resamples"] for r in rows if "low" in r.wer_ci)
        note += (f" 95 % CI: percentile bootstrap over utterances ({n:.0f} resamples)" + (
            f"; Δ: WER difference to {references[0]} in points, paired bootstrap on the same utterances (an interval "
            f"excluding 0 is a difference at 95 %)" if with_delta else "") + ".")
    if mixed:
        note += f" Utterance counts differ between rows for {', '.join(sorted(mixed))}: see the utts column(s)."
    return table + "\n\n" + note


def unavailable_table(rows: Sequence[Any]) -> str:
    """Markdown list of decoders that could not run here, with the reason (empty string if none)."""
    bad = [r for r in as_rows(rows) if not r.ok]
    if not bad:
        return ""
    body, seen = [], set()
    for r in bad:
        if r.label in seen:
            continue
        seen.add(r.label)
        body.append([r.label, str(r.reason)])
    return _table(["decoder", "not run here because"], body, n_text=2)


def environment_summary(rows: Sequence[Any]) -> str:
    """One line per distinct environment among the rows (runs on several machines list each)."""
    lines = []
    for r in ok_rows(rows):
        e = r.environment
        line = (f"torch {e.get('torch_version')} (CUDA {e.get('cuda_version')}), {e.get('gpu_name') or 'no GPU'}, "
                f"CPU {e.get('cpu_model')} x{e.get('cpu_count')}, commit {e.get('git_commit')}")
        if line not in lines:
            lines.append(line)
    return "; ".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Side by side: ours against a competitor measured in the same run
# ---------------------------------------------------------------------------------------------------------


@dataclass
class SideBySide:
    group: tuple  # the values of `by`
    dataset: str
    ours: ResultRow
    theirs: Optional[ResultRow]  # None: the competitor has no row for this group (e.g. Riva takes no HLG)

    @property
    def ratio(self) -> Optional[float]:
        """ours RTFx / theirs RTFx (decoder-only): how many times faster ours is."""
        a, b = self.ours.rtfx_decoder, None if self.theirs is None else self.theirs.rtfx_decoder
        return a / b if a is not None and b else None


def _coord(r: ResultRow, k: str) -> Any:
    """A grouping coordinate: a params entry, else a row field (batch_size, dataset, ...); None when this row
    lacks it (a run can hold differently shaped groups, e.g. offline and streaming rows)."""
    if k in r.params:
        return r.params[k]
    return getattr(r, k) if k in _ROW_FIELDS and k != "params" else None


def side_by_side_pairs(rows: Sequence[Any], ours: str, theirs: str,
                       by: Optional[Sequence[str]] = None) -> tuple[list[str], list[SideBySide]]:
    """Pair each successful row of decoder `ours` with its run mate of decoder `theirs` (same run, same `by`
    coordinates, same dataset; the two rows must name each other). Refuses (ValueError) rows whose boundary,
    dataset, utterance count, batch size or params differ: their ratio would compare unlike things."""
    rows = ok_rows(rows)
    mine = [r for r in rows if r.decoder_name == ours]
    if not mine:
        raise ValueError(f"side_by_side: no successful rows of decoder {ours!r}")
    if by is None:  # every grouping coordinate, and the batch size where rows of equal params differ in it
        by = list(dict.fromkeys(k for r in mine for k in r.params))
        batches: dict[str, set] = {}
        for r in mine:
            batches.setdefault(f"{r.params_label}|{r.dataset}", set()).add(r.batch_size)
        if any(len(b) > 1 for b in batches.values()) and "batch_size" not in by:
            by.append("batch_size")
    by = list(by)
    known = {k for r in rows for k in r.params} | (_ROW_FIELDS - {"params"})
    unknown = [k for k in by if k not in known]
    if unknown:
        raise ValueError(f"side_by_side: by key(s) {unknown} are neither params keys of any row nor row fields")
    pairs = []
    for r in mine:
        group = tuple(_coord(r, k) for k in by)
        cands = [m for m in rows if m.decoder_name == theirs and (m.experiment, m.run) == (r.experiment, r.run)
                 and m.decoder == r.run_mate and tuple(_coord(m, k) for k in by) == group]
        same_ds = [m for m in cands if m.dataset == r.dataset]
        if cands and not same_ds:
            raise ValueError(f"side_by_side: {r.label} ({r.dataset}) and its run mate {cands[0].label} "
                             f"({cands[0].dataset}) decoded different datasets")
        if len(same_ds) > 1:
            raise ValueError(f"side_by_side: {r.label} ({r.dataset}) has {len(same_ds)} run mates of {theirs!r} "
                             f"in group {dict(zip(by, group))}; add the coordinate that tells them apart to `by`")
        m = same_ds[0] if same_ds else None
        if m is not None:
            for what, a, b in (("boundary", r.boundary, m.boundary), ("utterance count", r.utterances, m.utterances),
                               ("params", r.params, m.params), ("batch size", r.batch_size, m.batch_size)):
                if a != b:
                    raise ValueError(f"side_by_side: refusing to pair {r.label} with {m.label}: {what} differs "
                                     f"({a} vs {b})")
            if m.run_mate != r.decoder:
                raise ValueError(f"side_by_side: {m.label} names run mate {m.run_mate!r}, not {r.decoder!r}")
        pairs.append(SideBySide(group, str(r.dataset), r, m))
    return by, pairs


def _group_text(by: Sequence[str], group: tuple) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in zip(by, group)) or "all"


def side_by_side_table(rows: Sequence[Any], ours: str, theirs: str, by: Optional[Sequence[str]] = None) -> str:
    """Markdown: per group, both decoders' decoder-only RTFx and the ratio, WER (when the rows have references),
    memory (CUDA peak on a GPU), our overflow/rescued counts, the timing boundary and the utterance count."""
    by, pairs = side_by_side_pairs(rows, ours, theirs, by)
    header = [*by, "dataset", "boundary", "utts", f"{ours} RTFx", f"{theirs} RTFx", f"x {theirs}",
              f"{ours} WER %", f"{theirs} WER %", f"{ours} mem MiB", f"{theirs} mem MiB", f"{ours} overflow/rescued"]
    body = []
    for p in pairs:
        o, t = p.ours, p.theirs
        body.append([*(_value(v) for v in p.group), p.dataset, o.boundary, str(o.utterances),
                     _fmt_rtfx(o.rtfx_decoder), "–" if t is None else _fmt_rtfx(t.rtfx_decoder),
                     "–" if p.ratio is None else f"{p.ratio:.2f}x",
                     _wer_pct(o), "–" if t is None else _wer_pct(t),
                     _fmt(memory_mib(o), ".0f"), "–" if t is None else _fmt(memory_mib(t), ".0f"),
                     f"{o.overflow_count}/{o.rescued_count}"])
    return _table(header, body, n_text=len(by) + 2)


def run_mate_pairs(rows: Sequence[Any]) -> list[tuple[str, str]]:
    """(ours, theirs) decoder names of the run-mate pairs in the rows, first-seen order. Ours is this project's
    decoder (OURS) when exactly one side is; otherwise the side whose row comes first."""
    rows = ok_rows(rows)
    by_label = {(r.experiment, r.run, r.decoder): r for r in rows}
    out: list[tuple[str, str]] = []
    for r in rows:
        m = by_label.get((r.experiment, r.run, r.run_mate)) if r.run_mate else None
        if m is None or m.decoder_name == r.decoder_name:
            continue
        a, b = r.decoder_name, m.decoder_name
        if b in OURS and a not in OURS:
            a, b = b, a
        if (a, b) not in out and (b, a) not in out:
            out.append((a, b))
    return out


def _ab_base_label(r: ResultRow) -> Optional[str]:
    """The defaults row's label of an in-process A/B arm's row (a benchmark's `--ab-env` arm: params["ab_env"] set,
    label "<label> [ab K=V ...]"), or None for any other row."""
    env = (r.params or {}).get("ab_env")
    suffix = f" [ab {env}]"
    return r.decoder[: -len(suffix)] if env and r.decoder.endswith(suffix) else None


def ab_arm_envs(rows: Sequence[Any]) -> list[str]:
    """The in-process A/B arms' switch sets (params["ab_env"]) the rows hold, sorted."""
    return sorted({r.params["ab_env"] for r in ok_rows(rows) if _ab_base_label(r) is not None})


def ab_arm_rows(rows: Sequence[Any], bases: Sequence[Any], env: Optional[str] = None) -> list[Optional[ResultRow]]:
    """Per base row: its in-process A/B arm's row (same run, same boundary, an RTFx measured), or None; with `env`,
    only that arm's rows (a run of several arms), else the first of `ab_arm_envs`."""
    env = env if env is not None else next(iter(ab_arm_envs(rows)), None)
    arms = {}
    for r in ok_rows(rows):
        base = _ab_base_label(r)
        if base is not None and r.rtfx_decoder and r.params["ab_env"] == env:
            arms[(r.experiment, r.run, base)] = r
    out = []
    for b in bases:
        a = arms.get((b.experiment, b.run, b.decoder))
        out.append(a if a is not None and a.boundary == b.boundary else None)
    return out


def ab_pairs_table(rows: Sequence[Any]) -> str:
    """Markdown: the in-process A/B rows (a benchmark's `--ab-env` arm: params["ab_env"] set, label "<label> [ab
    K=V ...]") beside the same run's row of <label> (the defaults), timed interleaved in one process: both RTFx and
    default / A/B arm. Where the defaults row has a run mate (a competitor measured on the same inputs in the same
    run), the competitor and both arms' RTFx over its RTFx as well, so an arm's standing against the competitor is
    read off the same run. Empty when the rows hold no A/B arm."""
    rows = ok_rows(rows)
    by_label = {(r.experiment, r.run, r.decoder): r for r in rows}
    body, any_mate = [], False
    for r in rows:
        label = _ab_base_label(r)
        base = None if label is None else by_label.get((r.experiment, r.run, label))
        if base is None or base.boundary != r.boundary:
            continue
        env = r.params["ab_env"]
        ratio = (base.rtfx_decoder / r.rtfx_decoder) if base.rtfx_decoder and r.rtfx_decoder else None
        mate = by_label.get((base.experiment, base.run, base.run_mate)) if base.run_mate else None
        paired = mate is not None and mate.boundary == base.boundary and bool(mate.rtfx_decoder)
        any_mate |= paired
        over = [x.rtfx_decoder / mate.rtfx_decoder if paired and x.rtfx_decoder else None for x in (base, r)]
        body.append([base.decoder, r.boundary, env, _fmt_rtfx(base.rtfx_decoder), _fmt_rtfx(r.rtfx_decoder),
                     "–" if ratio is None else f"{ratio:.2f}x",
                     mate.decoder_name if paired else "–", _fmt_rtfx(mate.rtfx_decoder) if paired else "–",
                     *("–" if q is None else f"{q:.2f}x" for q in over)])
    if not body:
        return ""
    header = ["decoder", "boundary", "A/B arm", "defaults RTFx", "arm RTFx", "defaults / arm"]
    if not any_mate:
        return _table(header, [b[:6] for b in body], n_text=3)
    return _table(header + ["competitor", "competitor RTFx", "defaults x competitor", "arm x competitor"], body,
                  n_text=3)


# ---------------------------------------------------------------------------------------------------------
# The whole report
# ---------------------------------------------------------------------------------------------------------


def markdown_report(rows: Sequence[Any], title: str = "Decoder comparison") -> str:
    rows = as_rows(rows)
    parts = [f"# {title}", "", results_table(rows), ""]
    for ours, theirs in run_mate_pairs(rows):
        parts += [f"## {ours} vs {theirs} (same run, same inputs)", "", side_by_side_table(rows, ours, theirs), ""]
    ab = ab_pairs_table(rows)
    if ab:
        parts += ["## In-process A/B (the arm's switches vs the defaults, interleaved per repeat)", "", ab, ""]
    extra = unavailable_table(rows)
    if extra:
        parts += ["Not run:", "", extra, ""]
    env = environment_summary(rows)
    if env:
        parts += [f"Environment: {env}", ""]
    parts += [
        "WER: corpus WER after text normalisation (jiwer); CER: the same over characters; n/a: no references "
        "(synthetic inputs). "
        "S/D/I: substitutions/deletions/insertions. RTFx: audio seconds / decoder wall seconds (warm-up excluded); "
        "boundary api: the public decode call, host tensors in and hypotheses out; kernel: device work only. "
        "mem: on GPU the device memory the decoder holds (cudaMemGetInfo delta from before it was built, every "
        "allocator) where measured, else the torch allocator peak; host RSS rise during decoding on CPU.",
        "",
    ]
    return "\n".join(parts)


def gate_table(checks: Sequence[Any]) -> str:
    """eval.gate's report: one line per check (objects with decoder, dataset, metric, status, baseline, current,
    note), failures first, then the verdict with the count of each status."""

    def num(metric: str, v: Optional[float]) -> str:
        if v is None:
            return "–"
        return f"{100 * v:.2f}%" if metric == "wer" else f"{v:.1f}"

    lines = ["| decoder | dataset | metric | baseline | current | status | note |", "|---|---|---|---:|---:|---|---|"]
    order = {"FAIL": 0, "pass": 1, "n/a": 2, "new": 3, "skip": 4}
    for c in sorted(checks, key=lambda c: order.get(c.status, 9)):
        lines.append(
            f"| {c.decoder} | {c.dataset} | {c.metric} | {num(c.metric, c.baseline)} | "
            f"{num(c.metric, c.current)} | {c.status} | {c.note} |"
        )
    n_fail = sum(1 for c in checks if c.status == "FAIL")
    verdict = "GATE PASSED" if n_fail == 0 else f"GATE FAILED: {n_fail} regression(s)"
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "FAIL", "skip", "new", "n/a")}
    return "\n".join(lines) + f"\n\n{verdict} ({', '.join(f'{k} {v}' for k, v in counts.items())})"
