"""``python -m contracts.matrix`` is ``python -m contracts matrix`` (contracts.commands.matrix)."""

from .commands.matrix import main

if __name__ == "__main__":
    raise SystemExit(main())
