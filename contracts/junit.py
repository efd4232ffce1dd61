"""Entry point of earlier releases: ``python -m contracts.junit BUNDLE`` is ``python -m contracts report junit BUNDLE``."""

from .commands.report import junit_main as main

if __name__ == "__main__":
    raise SystemExit(main())
