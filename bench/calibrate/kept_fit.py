"""What the fits to kept validations share (``calibrate --refit PROFILE --rates-from DIR`` and
``--hops-from DIR``: :mod:`bench.calibrate.rates_fit`, :mod:`bench.calibrate.hops_fit`): the
folders they read, and the profile they write with the fit's record."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.errors import ConfigError
from engine.profile import LatencyProfile

Progress = Callable[[str], None]
Fit = Callable[[LatencyProfile, Sequence[Path], Progress], tuple[LatencyProfile, dict[str, Any], str]]


def distinct(flag: str, folders: Sequence[Path]) -> None:
    """Refuse folders of one name: their sets are named ``FOLDER/NAME``, and would be named alike."""
    if len({f.name for f in folders}) < len(folders):
        raise ConfigError(f"calibrate {flag}: two folders of one name ("
                          + ", ".join(str(f) for f in folders) + "): their sets would be named alike")


def refitted(fit: Fit, key: str, path: str, folders: Sequence[str], out: str, command: str,
             progress: Progress = lambda s: None, name: str | None = None,
             after: Callable[[dict[str, Any], dict[str, Any], str], dict[str, Any]] | None = None) -> LatencyProfile:
    """The profile at ``path``, named ``name`` (by default as it was), ``fit`` to the validations
    in ``folders``, saved to ``out``: the notes and ``provenance.extra[key]`` (the fit's record)
    say when, from what and by what command; ``after(provenance, record, note)`` gives more of
    the provenance to update."""
    profile = LatencyProfile.load(path)
    if name:
        profile = dataclasses.replace(profile, name=name)
    fitted, record, note = fit(profile, [Path(f) for f in folders], progress)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    prov = dict(profile.provenance)
    prov["extra"] = {**dict(prov.get("extra", {})), key: {**record, "at": when, "command": command}}
    prov["notes"] = str(prov.get("notes", "")) + f"; {note} (fitted {when} by `{command}`)"
    if after is not None:
        prov.update(after(prov, record, note))
    return fitted.derived(provenance=prov).save(out)
