"""Entry point of earlier releases: ``python -m contracts.check`` is ``python -m contracts check`` (contracts.commands.check)."""

from .commands.check import main

if __name__ == "__main__":
    raise SystemExit(main())
