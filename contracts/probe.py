"""Entry point of earlier releases: ``python -m contracts.probe`` is ``python -m contracts probe`` (contracts.commands.probe)."""

from .commands.probe import main

if __name__ == "__main__":
    raise SystemExit(main())
