"""Entry point of earlier releases: ``python -m contracts.nightly`` is ``python -m contracts nightly`` (contracts.commands.nightly)."""

from .commands.nightly import main

if __name__ == "__main__":
    raise SystemExit(main())
