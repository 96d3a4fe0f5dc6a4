"""``python -m ownstate``: the same as the ``ownstate`` command.

It may touch only the command itself (``ownstate.cli``).
"""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main()
