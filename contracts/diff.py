"""Entry point of earlier releases: ``python -m contracts.diff`` is ``python -m contracts diff`` (contracts.commands.diff)."""

from .commands.diff import main

if __name__ == "__main__":
    raise SystemExit(main())
