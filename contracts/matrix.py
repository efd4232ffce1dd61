"""``python -m contracts.matrix`` is ``python -m contracts matrix`` (contracts.commands.matrix)."""

from .commands._common import exit_process
from .commands.matrix import main

if __name__ == "__main__":
    exit_process(main())
