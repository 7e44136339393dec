"""Latency profiles as data: per operation kind a distribution, per shared resource its capacity.

A profile is one JSON file (``datasets/latency/NAME.json``; the format is the latency-profile
contract, described in ``datasets/README.md``): ``name``, ``provenance`` (where, when and how it was
measured), ``operations`` (every kind of :data:`engine.clock.DEFAULT_LATENCIES_US`, each
``{"constant": µs}`` or percentiles ``p0``/``p50``/``p90``/``p95``/``p99``/``p999``/``max``, at least
``p50``; a kind of :data:`LATER_KINDS` may be left out, and so may ``rpc.broker`` and
``meta.scan_get``, then the profile's ``rpc`` and ``meta.read``: :data:`SAME_AS`) and optional ``resources`` (``service_us`` µs
or ``"latency"``, or for ``cpu`` per kind ``{kind: µs}``, ``concurrency``, optional ``shared``, ``kinds``, ``latency_kinds``: see
:class:`engine.clock.ResourceSpec`). A bad file is one :class:`ConfigError` naming the file and the key.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from engine.clock import DEFAULT_LATENCIES_US, PERCENTILES, Distribution, LatencyModel, ResourceSpec
from engine.errors import ConfigError

RESOURCES = ("metadata", "bookie", "coordinator", "dispatch", "cpu")  # the contract's shared resources
PER_KIND = ("cpu",)  # service_us is per kind, {kind: µs} (ResourceSpec.kind_service_us), and only there
SERVED = ("coordinator",)  # billed by Meter.serve: a fixed service time, no latency of its own
CONSTANTS_NAME = "constants"
# Kinds added after profiles were shipped: a profile without one bills it 0, as every profile did
# before it existed (and writes it only when it is not 0, so those files read back byte for byte)
LATER_KINDS = frozenset({"meta.list_keys", "meta.list_entries", "meta.notify", "coordinator.v4", "coordinator.v5",
                         "dispatch.entry"})
# Kinds split from another after profiles were shipped: a profile without one bills it as the
# kind it was split from (and writes it only when it differs, so those files read back byte for byte)
SAME_AS = {"rpc.broker": "rpc", "meta.scan_get": "meta.read"}


@dataclass(frozen=True)
class LatencyProfile:
    name: str
    provenance: Mapping[str, Any]
    operations: Mapping[str, Distribution]
    resources: Mapping[str, ResourceSpec] = field(default_factory=dict)
    path: str | None = None  # the file it was loaded from (None: built here)
    sha256: str = ""  # of the file's bytes, or of what save() would write

    @classmethod
    def constants(cls) -> LatencyProfile:
        """Today's hand-written constants (:data:`DEFAULT_LATENCIES_US`), no resources: what
        ``datasets/latency/constants.json`` holds, byte for byte."""
        prof = cls(CONSTANTS_NAME, {"notes": "hand-written round figures (engine/clock.py DEFAULT_LATENCIES_US), "
                                             "never measured; infinite capacity"},
                   {k: Distribution.constant(v) for k, v in DEFAULT_LATENCIES_US.items()})
        return cls(prof.name, prof.provenance, prof.operations, {}, None,
                   hashlib.sha256(prof.to_text().encode()).hexdigest())

    @classmethod
    def load(cls, path: str | Path) -> LatencyProfile:
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise ConfigError(f"latency profile {p}: cannot read it ({exc.strerror or exc})") from None
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"latency profile {p}: not JSON ({exc})") from None
        return cls.from_json(data, str(p), hashlib.sha256(raw).hexdigest())

    @classmethod
    def from_json(cls, data: Any, source: str = "<profile>", sha256: str = "") -> LatencyProfile:
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"latency profile {source}: {key}: {why}")

        if not isinstance(data, dict):
            raise bad("(top level)", "expected an object")
        unknown = sorted(set(data) - {"name", "provenance", "operations", "resources"})
        if unknown:
            raise bad(unknown[0], "unknown key; expected name, provenance, operations, resources")
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise bad("name", "expected a non-empty string")
        prov = data.get("provenance", {})
        if not isinstance(prov, dict):
            raise bad("provenance", "expected an object")
        ops = data.get("operations")
        if not isinstance(ops, dict):
            raise bad("operations", "expected an object of operation kinds")
        for kind in ops:
            if kind not in DEFAULT_LATENCIES_US:
                raise bad(f"operations.{kind}", f"unknown operation kind; expected {', '.join(DEFAULT_LATENCIES_US)}")
        ops = {**{k: {"constant": 0} for k in LATER_KINDS}, **{k: ops[o] for k, o in SAME_AS.items() if o in ops}, **ops}
        missing = [k for k in DEFAULT_LATENCIES_US if k not in ops]
        if missing:
            raise bad(f"operations.{missing[0]}", "missing (a profile gives every operation kind)")
        dists = {kind: _distribution(ops[kind], f"operations.{kind}", bad) for kind in DEFAULT_LATENCIES_US}
        res_raw = data.get("resources", {})
        if not isinstance(res_raw, dict):
            raise bad("resources", "expected an object")
        resources: dict[str, ResourceSpec] = {}
        for rname, spec in res_raw.items():
            key = f"resources.{rname}"
            if rname not in RESOURCES:
                raise bad(key, f"unknown resource; expected {', '.join(RESOURCES)}")
            if not isinstance(spec, dict) or not {"service_us", "concurrency"} <= set(spec) <= {
                    "service_us", "concurrency", "shared", "kinds", "latency_kinds"}:
                raise bad(key, "expected an object with service_us, concurrency and optionally shared, kinds, "
                               "latency_kinds")
            service, conc, shared = spec["service_us"], spec["concurrency"], spec.get("shared", False)
            kinds, own = spec.get("kinds"), spec.get("latency_kinds", [])
            if rname in PER_KIND:
                if (not isinstance(service, dict) or not service or "kinds" in spec or own
                        or any(k not in DEFAULT_LATENCIES_US or not _is_int(v) or v < 0 for k, v in service.items())):
                    raise bad(f"{key}.service_us", "expected an object of operation kinds, each the µs (an integer "
                                                   f">= 0) a call of it works on the {rname}, and no kinds or "
                                                   f"latency_kinds, got {service!r}")
                if not _is_int(conc) or conc < 1:
                    raise bad(f"{key}.concurrency", f"expected an integer >= 1, got {conc!r}")
                resources[rname] = ResourceSpec.cores(service, conc)
                continue
            if kinds is not None and (not isinstance(kinds, list) or not kinds
                                      or any(k not in DEFAULT_LATENCIES_US for k in kinds)):
                raise bad(f"{key}.kinds", f"expected a list of operation kinds, got {kinds!r}")
            if not isinstance(own, list) or any(k not in (DEFAULT_LATENCIES_US if kinds is None else kinds)
                                                for k in own):
                raise bad(f"{key}.latency_kinds", f"expected a list of kinds the resource serves, got {own!r}")
            if service == "latency":
                if rname in SERVED:
                    raise bad(f"{key}.service_us", f"{rname} serves requests that have no latency of their own: "
                                                   "expected an integer >= 0 (µs)")
                service = None
            elif not _is_int(service) or service < 0:
                raise bad(f"{key}.service_us", f'expected an integer >= 0 (µs) or "latency", got {service!r}')
            if not _is_int(conc) or conc < 1:
                raise bad(f"{key}.concurrency", f"expected an integer >= 1, got {conc!r}")
            if not isinstance(shared, bool):
                raise bad(f"{key}.shared", f"expected true or false, got {shared!r}")
            resources[rname] = ResourceSpec(service, conc, shared, None if kinds is None else frozenset(kinds),
                                            frozenset(own))
        return cls(name, prov, dists, resources, None if source.startswith("<") else source, sha256)

    def to_json(self) -> dict[str, Any]:
        ops: dict[str, Any] = {}
        for kind, dist in self.operations.items():
            if kind in LATER_KINDS and dist.is_constant and dist.points[0][1] == 0:
                continue
            if kind in SAME_AS and dist == self.operations.get(SAME_AS[kind]):
                continue
            if dist.is_constant:
                ops[kind] = {"constant": dist.points[0][1]}
            else:
                names = {q: n for n, q in PERCENTILES.items()}
                ops[kind] = {names[q]: v for q, v in dist.points}
        out: dict[str, Any] = {"name": self.name, "provenance": dict(self.provenance), "operations": ops}
        if self.resources:
            out["resources"] = {r: {"service_us": dict(s.kind_service_us), "concurrency": s.concurrency}
                                if s.kind_service_us else
                                {"service_us": "latency" if s.service_us is None else s.service_us,
                                    "concurrency": s.concurrency, **({"shared": True} if s.shared else {}),
                                    **({"kinds": sorted(s.kinds)} if s.kinds is not None else {}),
                                    **({"latency_kinds": sorted(s.latency_kinds)} if s.latency_kinds else {})}
                                for r, s in self.resources.items()}
        return out

    def to_text(self) -> str:
        """The file's text: indented JSON, one line per operation kind and per resource."""
        data = self.to_json()
        lines = ["{", f'  "name": {json.dumps(data["name"], ensure_ascii=False)},',
                 '  "provenance": ' + json.dumps(data["provenance"], indent=2, ensure_ascii=False).replace("\n", "\n  ") + ","]
        for section in ("operations", "resources"):
            if section not in data:
                continue
            items = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in data[section].items()]
            lines += [f'  "{section}": {{', ",\n".join(items), "  },"]
        lines[-1] = "  }"
        return "\n".join(lines + ["}"]) + "\n"

    def save(self, path: str | Path) -> LatencyProfile:
        """Write the file whole (a temporary file renamed over it); returns the profile as loaded
        from there (with its path and sha256)."""
        p = Path(path)
        text = self.to_text()
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        try:
            tmp.write_text(text)
            tmp.replace(p)
        finally:
            tmp.unlink(missing_ok=True)
        return LatencyProfile(self.name, self.provenance, self.operations, self.resources, str(p),
                              hashlib.sha256(text.encode()).hexdigest())

    def derived(self, *, provenance: Mapping[str, Any] | None = None,
                operations: Mapping[str, Distribution] | None = None,
                resources: Mapping[str, ResourceSpec] | None = None) -> LatencyProfile:
        """This profile with the given parts replaced, not saved (no path, no sha256): what a
        calibration's fits build on one another."""
        return LatencyProfile(self.name, self.provenance if provenance is None else provenance,
                              self.operations if operations is None else operations,
                              self.resources if resources is None else resources)

    def to_latency_model(self, seed: int = 1) -> LatencyModel:
        """The model that bills this profile; a :data:`SAME_AS` kind with its origin's distribution
        draws from its origin's stream, so a profile that does not set it bills as before the split."""
        ops = self.operations
        return LatencyModel({k: d.nominal_us for k, d in ops.items()},
                            {k: d for k, d in ops.items() if not d.is_constant},
                            seed, dict(self.resources),
                            {k: o for k, o in SAME_AS.items() if ops.get(k) == ops.get(o)})

    def record(self, model: LatencyModel | None = None) -> dict[str, Any]:
        """What a manifest says of it: name, path, sha256, provenance; with the model a run used,
        its seed and the kinds overridden (``--latency``)."""
        out: dict[str, Any] = {"name": self.name, "path": self.path, "sha256": self.sha256,
                               "provenance": dict(self.provenance)}
        if model is not None:
            out["seed"] = model.seed
            if model.resources:  # the capacities the run queued with
                out["resources"] = {r: s.describe(r) for r, s in sorted(model.resources.items())}
            out["overrides"] = {k: v for k, v in model.latencies_us.items()
                                if k not in model.distributions and (k not in self.operations or
                                                                     self.operations[k] != Distribution.constant(v))}
        return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _distribution(spec: Any, key: str, bad: Any) -> Distribution:
    if not isinstance(spec, dict) or not spec:
        raise bad(key, "expected {\"constant\": µs} or percentiles (p0, p50, p90, p95, p99, p999, max)")
    if "constant" in spec:
        if len(spec) != 1:
            raise bad(key, "a constant has no percentiles beside it")
        v = spec["constant"]
        if not _is_int(v) or v < 0:
            raise bad(f"{key}.constant", f"expected an integer >= 0 (µs), got {v!r}")
        return Distribution.constant(v)
    for name in spec:
        if name not in PERCENTILES:
            raise bad(f"{key}.{name}", f"unknown percentile; expected {', '.join(PERCENTILES)} or constant")
    if "p50" not in spec:
        raise bad(f"{key}.p50", "missing (a distribution gives at least p50)")
    points: list[tuple[float, int]] = []
    for name, q in PERCENTILES.items():
        if name not in spec:
            continue
        v = spec[name]
        if not _is_int(v) or v < 0:
            raise bad(f"{key}.{name}", f"expected an integer >= 0 (µs), got {v!r}")
        if points and v < points[-1][1]:
            prev = next(n for n, pq in PERCENTILES.items() if pq == points[-1][0])
            raise bad(f"{key}.{name}", f"{v} is below {prev} ({points[-1][1]}): percentiles must not decrease")
        points.append((q, v))
    return Distribution(tuple(points))


LATENCY_DIR = Path(__file__).resolve().parent.parent / "datasets" / "latency"


def resolve(name_or_path: str) -> Path:
    """A profile file: a path, or the name of a shipped one (``datasets/latency/NAME.json``)."""
    p = Path(name_or_path)
    if p.suffix == ".json" or os.sep in name_or_path or p.exists():
        return p
    shipped = LATENCY_DIR / f"{name_or_path}.json"
    if not shipped.is_file():
        names = ", ".join(sorted(f.stem for f in LATENCY_DIR.glob("*.json")))
        raise ConfigError(f"latency profile {name_or_path!r}: no such file, nor a shipped profile ({names})")
    return shipped
