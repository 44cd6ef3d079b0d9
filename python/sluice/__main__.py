"""The ``sluice`` command, run in this interpreter.

``pip install`` puts ``sluice`` on PATH as a console script that calls
:func:`main`: the command line is compiled into ``sluice._native``, the
same build the module's ``Lake`` uses, so a wheel carries sluice once.
``python -m sluice …`` is the same command; a run starts its workers that
way, with this interpreter.
"""

from __future__ import annotations

import signal
import sys

from . import _native


def main() -> None:
    """Run ``sluice`` with this process's arguments and exit with its status."""
    if not sys.executable:
        sys.exit("error: sluice cannot tell which Python runs it (sys.executable is empty)")
    # Ctrl-C ends the command as it ends a binary: Python's own handler only
    # raises KeyboardInterrupt between bytecodes, and the command runs none.
    # A `sluice run` or `ingest` sets its own handler for a graceful stop.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_native.main(["sluice", *sys.argv[1:]], sys.executable))


if __name__ == "__main__":
    main()
