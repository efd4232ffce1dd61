"""Entry point of earlier releases: ``python -m contracts.search`` is ``python -m contracts search`` (contracts.commands.search)."""

from .commands._common import exit_process
from .commands.search import main

if __name__ == "__main__":
    exit_process(main())
