"""Entry point of earlier releases: ``python -m contracts.merge`` is ``python -m contracts merge`` (contracts.commands.merge)."""

from .commands.merge import main

if __name__ == "__main__":
    raise SystemExit(main())
