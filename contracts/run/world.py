"""Where this process stands: its place in a torchrun world (``World``, from the environment torchrun sets), or the
one process of a plain run (``OneProcess``, rank 0 of 1), which library functions take when not under torchrun.
``contracts.run.distributed`` joins a world; its docstring has the variables and what each rank does."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Callable, Mapping

from ..reports.schema import CheckResult
from .rank_merge import Part

__all__ = ["ONE_PROCESS", "OneProcess", "World", "WorldError", "gpu_for"]


class WorldError(RuntimeError):
    """The torchrun environment is incomplete or inconsistent; the message names the variable."""


@dataclass(frozen=True)
class World:
    """This process's place in a torchrun world (``from_env``)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent hosts the store; else rank 0 does
    run_id: str
    restart: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "World | None":
        """The world torchrun describes in ``env`` (default ``os.environ``); None for one process (WORLD_SIZE unset or 1)."""
        env = os.environ if env is None else env

        def number(name: str, default: int | None = None) -> int:
            text = env.get(name)
            if text is None:
                if default is None:
                    raise WorldError(f"WORLD_SIZE={env.get('WORLD_SIZE')} but {name} is not set; launch with torchrun, "
                                     "or set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")  # fmt: skip
                return default
            try:
                return int(text)
            except ValueError:
                raise WorldError(f"{name}={text!r} is not an integer") from None

        size = number("WORLD_SIZE", 1)
        if size <= 1:
            return None
        rank, local_rank = number("RANK"), number("LOCAL_RANK")
        if not 0 <= rank < size:
            raise WorldError(f"RANK={rank} is outside WORLD_SIZE={size} (0..{size - 1})")
        if not env.get("MASTER_ADDR"):
            raise WorldError("MASTER_ADDR is not set: the address of the store that the ranks share (torchrun sets it)")
        return cls(
            rank=rank, world_size=size, local_rank=local_rank, local_world_size=number("LOCAL_WORLD_SIZE", size),
            node_rank=number("GROUP_RANK", 0), master_addr=env["MASTER_ADDR"], master_port=number("MASTER_PORT"),
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
            run_id=env.get("TORCHELASTIC_RUN_ID", "none"), restart=number("TORCHELASTIC_RESTART_COUNT", 0),
        )  # fmt: skip

    def shard_of(self, rank: int, user: tuple[int, int] | None) -> tuple[int, int]:
        """Rank ``rank``'s slice of the cases (1-based ``(I, N)``), inside the user's ``--shard`` if one was given."""
        i, n = user or (1, 1)
        return i + n * rank, n * self.world_size


def gpu_for(local_rank: int, env: Mapping[str, str]) -> str | None:
    """The GPU (as CUDA_VISIBLE_DEVICES names it) of this local rank; None when fewer are visible."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(local_rank)
    choices = [v.strip() for v in visible.split(",") if v.strip()]
    return choices[local_rank] if local_rank < len(choices) else None


# ---------------------------------------------------------------- one process


class OneProcess:
    """The world of a plain run: rank 0 of 1. Library functions take this when not under torchrun."""

    rank, world_size, writer = 0, 1, True
    host = platform.node()

    def __init__(self, stop: Callable[[], object] | None = None):
        self.stop = stop or (lambda: None)

    def shard(self, user: tuple[int, int] | None) -> tuple[int, int] | None:
        return user

    def runs_replay(self) -> bool:
        return True

    def gather(self, label: str, value) -> list["Part"]:
        return [Part(0, self.host, "", value)]

    def gather_check(self, result: CheckResult) -> CheckResult:
        return result


ONE_PROCESS = OneProcess()
