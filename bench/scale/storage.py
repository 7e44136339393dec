"""Where a Spark replay's trace, its executors' spool and its result directory live: a local
path (as everywhere else), or any URI one of pyarrow's filesystems reaches (``file://``,
``s3://``, ``gs://``, ``hdfs://``, ...; :meth:`pyarrow.fs.FileSystem.from_uri`), so that
executors on other hosts read the trace and write their rows where the driver finds them.

A result directory is published to a URI by copying a finished local one, ``manifest.json``
last: object stores have no atomic rename, and a result set without its manifest is not one
(:func:`bench.replay.results.load` refuses it)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.fs as pafs

from engine.errors import ConfigError

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")  # two letters at least: not a drive letter


def is_uri(location: str | Path) -> bool:
    return isinstance(location, str) and bool(_SCHEME.match(location))


def resolve(location: str | Path, what: str = "path") -> tuple[pafs.FileSystem, str]:
    """The filesystem that holds ``location`` and the path on it (local paths made absolute)."""
    if not is_uri(location):
        return pafs.LocalFileSystem(), str(Path(location).resolve())
    try:
        return pafs.FileSystem.from_uri(str(location))
    except (ValueError, OSError, TypeError) as exc:  # unknown scheme, unreachable store, bad URI
        raise ConfigError(f"{what} {location}: no pyarrow filesystem reaches it ({exc})") from None


def child(location: str | Path, name: str) -> str:
    """``location``/``name``, for a URI or a path alike."""
    if is_uri(location):
        return f"{str(location).rstrip('/')}/{name}"
    return str(Path(location) / name)


def sibling(location: str | Path, name: str) -> str:
    """``name`` in the directory that holds ``location``."""
    if is_uri(location):
        head = str(location).rstrip("/").rsplit("/", 1)[0]
        return f"{head}/{name}"
    return str(Path(location).resolve().with_name(name))


def basename(location: str | Path) -> str:
    return str(location).rstrip("/").rsplit("/", 1)[-1]


def exists(location: str | Path) -> bool:
    fs, path = resolve(location)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def is_file(location: str | Path) -> bool:
    fs, path = resolve(location)
    return fs.get_file_info(path).type == pafs.FileType.File


def list_files(fs: pafs.FileSystem, directory: str, suffix: str = "") -> list[str]:
    """Paths of the files directly in ``directory`` whose names end in ``suffix``, sorted; none
    when it does not exist."""
    infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(suffix)
                  and not i.base_name.startswith("."))


def publish_dir(local: Path, location: str) -> None:
    """Copy the finished result directory ``local`` to ``location`` (refused if it exists),
    ``manifest.json`` last; on failure what was copied is removed."""
    fs, dest = resolve(location, "--out")
    if fs.get_file_info(dest).type != pafs.FileType.NotFound:
        raise ConfigError(f"--out {location} exists; give a new location")
    files = sorted((p for p in local.rglob("*") if p.is_file()), key=lambda p: (p.name == "manifest.json", str(p)))
    try:
        fs.create_dir(dest, recursive=True)
        for f in files:
            target = f"{dest}/{f.relative_to(local).as_posix()}"
            fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            pafs.copy_files(str(f), target, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    except BaseException:
        try:
            fs.delete_dir(dest)
        except OSError:
            pass
        raise
