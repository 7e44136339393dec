"""Starting a CLI process as a terminal's foreground job has it, for the tests that press Ctrl-C.

A shell without job control starts its background commands with SIGINT ignored, their children
inherit that, and Python then installs no KeyboardInterrupt handler (it keeps an ignored SIGINT
ignored, as every program should under ``nohup`` or ``&``). A test suite started that way (say
``python -m pytest ... &`` from a script) would see Ctrl-C ignored by the very CLI it checks Ctrl-C
on, and time out. ``scripts/test`` runs through bash, which starts its commands with SIGINT at its
default again, so only a direct launch showed it (session 45's one failure, reproduced in 46).
"""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def popen_with_ctrl_c(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` whose process starts with SIGINT at its default action,
    whatever this process inherited: a handler caught here is reset to the default by exec, so the
    handler is swapped in around the fork (the tests run in the main thread) instead of a
    ``preexec_fn``, which is unsafe beside threads."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)
