"""Entry point of earlier releases: ``python -m contracts.html_report BUNDLE`` is ``python -m contracts report html BUNDLE``."""

from .commands.report import html_main as main

if __name__ == "__main__":
    raise SystemExit(main())
