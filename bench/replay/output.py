"""Where a verb's output goes: staged in a temporary sibling, renamed into place when complete.

Rules (issue 20), for every verb that takes ``--out``:

- Checked before work starts (:func:`check_out`): ``--out`` must not be a symbolic link, a file
  (or ``FILE/child``), or a non-empty directory, unless ``--force``; and even with ``--force`` a
  non-empty directory is replaced only if txnbench wrote it (it holds :data:`MARKER`).
- Everything is written into a fresh private directory (``mkdtemp``: mode 0700, a new name, so
  no planted symlink is ever followed) beside ``--out``; on success its entries are renamed into
  ``--out`` (a rename replaces a name, it never writes through a link). On any exception,
  including KeyboardInterrupt and the SIGTERM/SIGHUP the CLI turns into one, the staging
  directory is removed and ``--out`` is left as it was.
- ``--force`` over a txnbench directory removes only the entries the marker lists (what the
  previous run wrote), except inputs of this run (``protect``: e.g. a trace read from there);
  anything else in the directory is kept, and a new entry whose name is taken by a file
  txnbench did not write is refused.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from engine.errors import ConfigError

MARKER = ".txnbench-output"  # the names of the entries txnbench wrote here, one a line


def _fail(out: Path, why: str) -> ConfigError:
    return ConfigError(f"--out {out}: {why}")


def check_out(out: str | Path, *, force: bool = False, kind: str = "dir") -> Path:
    """Refuse an ``--out`` this run must not write (see the module docstring); returns it as a
    Path. ``kind`` is ``"dir"`` or ``"file"`` (a single output file, e.g. a trace)."""
    p = Path(out)
    if str(out) in ("", ".", "..") or p.name in ("", ".", ".."):
        raise _fail(p, "name a new directory (not . or ..)")
    if p.is_symlink():
        raise _fail(p, "is a symbolic link; refusing to write through it")
    parent = p.parent
    probe = parent
    while not probe.exists():  # the nearest existing ancestor must be a writable directory
        if probe.is_symlink():
            raise _fail(p, f"{probe} is a dangling symbolic link")
        probe = probe.parent
    if not probe.is_dir():
        raise _fail(p, f"{probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _fail(p, f"{probe} is not writable")
    if not p.exists():
        return p
    if kind == "file":
        if p.is_dir():
            raise _fail(p, "is a directory; expected a file name")
        if not force:
            raise _fail(p, "exists; pass --force to replace it")
        return p
    if not p.is_dir():
        raise _fail(p, "exists and is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise _fail(p, "is not writable")
    if any(True for _ in p.iterdir()):
        if not force:
            raise _fail(p, "is not empty; pass --force to replace what txnbench wrote there")
        if not (p / MARKER).is_file() or (p / MARKER).is_symlink():
            raise _fail(p, f"holds files txnbench did not write (no {MARKER}); refusing even with --force")
    return p


def _written(d: Path) -> list[str]:
    m = d / MARKER
    if not m.is_file() or m.is_symlink():
        return []
    return [n for n in m.read_text().splitlines() if n and "/" not in n and n not in (".", "..", MARKER)]


def _remove(p: Path) -> None:
    if p.is_symlink() or not p.is_dir():
        p.unlink(missing_ok=True)  # a link itself, never its target
    else:
        shutil.rmtree(p)  # rmtree does not follow symlinks inside the tree


def _commit(tmp: Path, final: Path, force: bool, protect: Iterable[Path]) -> None:
    new = sorted(e.name for e in tmp.iterdir() if e.name != MARKER)
    if not final.exists() and not final.is_symlink():
        (tmp / MARKER).write_text("".join(f"{n}\n" for n in new))
        os.rename(tmp, final)
        return
    check_out(final, force=force)  # again: something may have appeared meanwhile
    kept_inputs = {q.name for q in (Path(x).absolute() for x in protect) if q.parent == final.absolute()}
    old = [n for n in _written(final) if n not in kept_inputs]
    clash = [n for n in new if (os.path.lexists(final / n) and n not in old) or n in kept_inputs]
    if clash:
        raise _fail(final, f"{', '.join(clash)} would replace a file txnbench did not write or an input of this run")
    for n in old:
        if os.path.lexists(final / n):
            _remove(final / n)
    for n in new:
        os.rename(tmp / n, final / n)
    listed = sorted(set(new) | {n for n in _written(final) if n in kept_inputs and os.path.lexists(final / n)})
    (tmp / MARKER).write_text("".join(f"{n}\n" for n in listed))
    os.replace(tmp / MARKER, final / MARKER)


def _mkdir_parent(p: Path) -> None:
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(p, f"cannot create {p.parent} ({exc.strerror})") from None


@contextmanager
def staged_dir(out: str | Path, *, force: bool = False, protect: Iterable[Path] = ()) -> Iterator[Path]:
    """Yield a private temporary directory beside ``out``; when the body returns, its entries
    become ``out``'s. Nothing of it remains if the body (or the rename) fails."""
    final = check_out(out, force=force)
    _mkdir_parent(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.txnbench-", dir=final.parent))
    try:
        yield tmp
        _commit(tmp, final, force, list(protect))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def staged_file(out: str | Path, *, force: bool = False) -> Iterator[Path]:
    """Yield a new private temporary file beside ``out`` (created with O_EXCL, so never a
    planted link); when the body returns it replaces ``out`` in one rename."""
    final = check_out(out, force=force, kind="file")
    _mkdir_parent(final)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def shown_path(path: str | Path, shown: dict[str, str] | None) -> str:
    """``path`` as it will be once a staging directory (a key of ``shown``) is in place."""
    text = str(path)
    for staged, final in (shown or {}).items():
        if text == staged or text.startswith(staged + os.sep):
            return final + text[len(staged):]
    return text


def describe_os_error(exc: OSError) -> str:
    """One line for an OSError (a full disk, a read-only file system) naming the file."""
    what = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
    return f"{exc.filename}: {what}" if exc.filename else what
