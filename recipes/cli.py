"""Running the recipes' Hydra apps as plain CLIs (`python -m recipes.<name> key=value ...`), and keeping third-party
C++ chatter (kaldilm's `arpa_file_parser.cc` log lines, KenLM's loading banner and `****` bar) off the terminal."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Callable, Iterator, Sequence

# no run directory, no .hydra/ output, no log files: the recipe CLIs only write their artefacts
QUIET_HYDRA_OVERRIDES = [
    "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled",
]

# Lines native libraries print on success: kaldilm's info messages (a source-location line
# ".../arpa_file_parser.cc:void kaldilm::ArpaFileParser::Read(...):79" followed by "[I] Reading \data\ section."),
# Kaldi-style LOG/VLOG lines, KenLM's "Loading the LM will be faster if you build a binary file." banner, its
# "Reading <file>" line, progress ruler ("----5---10---...") and bar ("****..."). Warnings and errors (kaldilm's
# [W]/[E] with their location line, Kaldi's WARNING/ERROR, anything else) are kept.
NATIVE_CHATTER = re.compile(
    r"^\s*(\[I\] |LOG \(|VLOG\[|Loading the LM will be faster|Reading \S+$|----5---10|\*{20,}\s*$)"
)
_SOURCE_LOCATION = re.compile(r"^\S+\.(cc|cpp|h):.*:\d+\s*$")  # kaldilm's line before each message


def is_chatter(line: str) -> bool:
    return bool(NATIVE_CHATTER.match(line))


def filter_chatter(text: str) -> str:
    """`text` without NATIVE_CHATTER lines (and without the source-location line of a dropped kaldilm message)."""
    lines = text.splitlines(keepends=True)
    keep = []
    for i, line in enumerate(lines):
        if is_chatter(line):
            continue
        if _SOURCE_LOCATION.match(line) and i + 1 < len(lines) and is_chatter(lines[i + 1]):
            continue
        keep.append(line)
    return "".join(keep)


@contextlib.contextmanager
def quiet_native_output(enabled: bool = True, python_too: bool = False) -> Iterator[None]:
    """Capture what native code writes to file descriptors 1 and 2 inside the block and write it back afterwards
    without the NATIVE_CHATTER lines; when the block raises, everything captured is written back unfiltered, so a
    failure keeps its context. Python's own output (print, logging) keeps going to the terminal as it happens: for
    the block, sys.stdout/sys.stderr and the logging handlers writing to them are pointed at duplicates of the
    original descriptors. `python_too=True` captures Python's output as well and, when the block succeeds, keeps only
    the lines that report an error (for a library whose success path is all chatter, e.g. NeMo's restore: telemetry
    notices, training-config warnings). `enabled=False` (verbose) captures nothing."""
    if not enabled:
        yield
        return
    import io
    import logging

    streams = {1: sys.stdout, 2: sys.stderr}
    for stream in streams.values():
        with contextlib.suppress(Exception):
            stream.flush()
    saved, captures, replacements = {}, {}, {}
    try:
        for fd in (1, 2):
            saved[fd] = os.dup(fd)
            captures[fd] = tempfile.TemporaryFile(mode="w+b")
    except OSError:  # no such descriptor (a daemon): nothing to quieten
        for fd in saved:
            os.close(saved[fd])
        yield
        return
    for fd, orig in saved.items():
        replacements[fd] = io.TextIOWrapper(os.fdopen(os.dup(orig), "wb", buffering=0), encoding="utf-8",
                                            errors="replace", write_through=True, line_buffering=True)
        os.dup2(captures[fd].fileno(), fd)
    handler_streams = []
    for h in ([] if python_too else _all_handlers(logging)):
        stream = getattr(h, "stream", None)
        if stream is not streams[1] and stream is not streams[2]:
            continue
        try:  # logging's last-resort handler reads sys.stderr through a property: it follows by itself
            h.stream = replacements[1] if stream is streams[1] else replacements[2]
            handler_streams.append((h, stream))
        except AttributeError:
            pass
    if not python_too:
        sys.stdout, sys.stderr = replacements[1], replacements[2]
    failed = True
    try:
        yield
        failed = False
    finally:
        sys.stdout, sys.stderr = streams[1], streams[2]
        for h, stream in handler_streams:
            h.stream = stream
        for fd, orig in saved.items():
            os.dup2(orig, fd)
            os.close(orig)
            replacements[fd].close()
            cap = captures[fd]
            cap.seek(0)
            text = cap.read().decode("utf-8", errors="replace")
            cap.close()
            if not failed:
                text = _errors_only(text) if python_too else filter_chatter(text)
            if text:
                os.write(fd, text.encode("utf-8"))


def _errors_only(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if re.search(r"\berror\b", line, re.I))


def _all_handlers(logging) -> list:
    loggers = [logging.getLogger()] + [lg for lg in logging.root.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    return [h for lg in loggers for h in lg.handlers]


CLI_ERRORS = (ValueError, TypeError, FileNotFoundError)


def one_line_errors(task: Callable) -> Callable:
    """For a Hydra task function (under `@hydra.main`): bad input raised inside the task ends the process with one
    `error:` line and exit status 2 before Hydra logs "Error executing job ..." and a traceback
    (HYDRA_FULL_ERROR=1 in the user's environment keeps the traceback)."""
    import functools

    @functools.wraps(task)
    def wrapped(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except CLI_ERRORS as e:
            if os.environ.get("RECIPE_TRACEBACK") == "1":
                raise
            print(f"error: {_one_line(e)}", file=sys.stderr)
            sys.exit(2)

    return wrapped


def user_wants_traceback() -> None:
    """Call first thing in a recipe's main(): a user's HYDRA_FULL_ERROR=1 asks for tracebacks (RECIPE_TRACEBACK=1),
    before run_hydra_app sets HYDRA_FULL_ERROR itself to make Hydra re-raise."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        os.environ["RECIPE_TRACEBACK"] = "1"


def run_hydra_app(app: Callable[[], None], argv: Sequence[str]) -> None:
    """Call a `@hydra.main` app on `argv` (plus QUIET_HYDRA_OVERRIDES) instead of the process's sys.argv. Bad input
    (a ValueError/TypeError/FileNotFoundError from the recipe, an unknown or ill-typed key) ends the process with
    one `error:` line and exit status 2, not a traceback (RECIPE_TRACEBACK=1 keeps the traceback; a recipe's main()
    sets it when the user set HYDRA_FULL_ERROR=1: `user_wants_traceback`)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    traceback = os.environ.get("RECIPE_TRACEBACK") == "1"
    old, old_env = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [old[0], *argv, *QUIET_HYDRA_OVERRIDES]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing its own traceback
    try:
        app()
    except (ValueError, TypeError, FileNotFoundError, HydraException, OmegaConfBaseException) as e:
        if traceback:
            raise
        print(f"error: {_one_line(e)}", file=sys.stderr)
        sys.exit(2)
    finally:
        sys.argv = old
        if old_env is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = old_env


def _one_line(e: BaseException) -> str:
    """The message of `e` and of the error it wraps (Hydra wraps the recipe's own), whitespace folded."""
    text = " ".join(str(e).split()) or type(e).__name__
    cause = e.__cause__
    if cause is not None and " ".join(str(cause).split()) not in text:
        text += f": {' '.join(str(cause).split())}"
    return text
