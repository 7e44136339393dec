"""The v5 metadata store: the port (:mod:`.port`), its adapters (:mod:`.memory`, :mod:`.redis`,
:mod:`.emulated`, :mod:`.degraded`), the URL registry (:mod:`.registry`) and the record layout
bound to a store (:mod:`.records`). The port's names are re-exported here."""

from __future__ import annotations

from metadata_v5.store.port import *  # noqa: F401,F403
from metadata_v5.store.port import __all__  # noqa: F401
