"""How the ranks of a torchrun world talk: values in the c10d store (pickled, in chunks the store takes), a heartbeat
counter per rank that the others watch, and a stop that any rank posts and every rank sees. Never a collective, which a
dead rank could block (``contracts.run.distributed``'s docstring says why)."""

from __future__ import annotations

import pickle
import threading
import time
from typing import Callable

__all__ = ["CHUNK", "HEARTBEAT_S", "STOP_POLL_S", "Heartbeat", "SharedStop", "has", "put", "store_error", "take"]

HEARTBEAT_S = 1.0
STOP_POLL_S = 0.25  # a stop on another rank is seen within this (the store is not asked once per case)
CHUNK = 4 << 20  # the store's libuv server refuses values over 8 MiB


def store_error(exc: BaseException) -> bool:
    import torch.distributed as dist

    return isinstance(exc, (dist.DistError, RuntimeError, ConnectionError, OSError))


def put(store, key: str, value) -> None:
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    chunks = [blob[at : at + CHUNK] for at in range(0, len(blob), CHUNK)] or [b""]
    for n, chunk in enumerate(chunks):
        store.set(f"{key}/{n}", chunk)
    store.set(f"{key}/n", str(len(chunks)))  # last: its presence means the value is whole


def has(store, key: str) -> bool:
    return store.check([f"{key}/n"])


def take(store, key: str, *, delete: bool = True):
    count = int(store.get(f"{key}/n"))
    blob = b"".join(store.get(f"{key}/{n}") for n in range(count))
    if delete:
        for name in [*(f"{key}/{n}" for n in range(count)), f"{key}/n"]:
            store.delete_key(name)
    return pickle.loads(blob)


class Heartbeat(threading.Thread):
    """Beats this rank's counter, and watches the counters of ``watched`` ranks (on its own store connection)."""

    def __init__(self, connect: Callable, rank: int, watched: list[int]):
        super().__init__(name="router-contracts-heartbeat", daemon=True)
        self._connect, self._rank, self._watched = connect, rank, watched
        self._halt = threading.Event()
        self._lock = threading.Lock()
        now = time.monotonic()
        self._seen = {r: (-1, now) for r in watched}  # rank -> (counter, when it last moved)
        self.store_gone: str | None = None

    def run(self) -> None:
        try:
            store = self._connect()
            while True:
                store.add(f"hb/{self._rank}", 1)
                for r in self._watched:
                    beat = store.add(f"hb/{r}", 0)
                    with self._lock:
                        if beat != self._seen[r][0]:
                            self._seen[r] = (beat, time.monotonic())
                if self._halt.wait(HEARTBEAT_S):
                    return
        except Exception as exc:  # noqa: BLE001 -- the store is gone: every watched rank counts as lost
            self.store_gone = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def silent_for(self, rank: int) -> float:
        """Seconds since ``rank``'s counter last moved (infinite once the store is gone)."""
        if self.store_gone:
            return float("inf")
        with self._lock:
            return time.monotonic() - self._seen[rank][1]

    def close(self) -> None:
        self._halt.set()
        self.join(timeout=2 * HEARTBEAT_S)


class SharedStop:
    """The local stop (signals) joined with the world's: a stop on any rank is posted, and seen by every rank."""

    def __init__(self, local: Callable[[], object], store, rank: int):
        self._local, self._store, self._rank = local, store, rank
        self._posted = False
        self._remote: str | None = None
        self._next_poll = 0.0

    def __call__(self) -> str | None:
        reason = self._local() or self._remote
        if reason:
            self.post(str(reason))
            return str(reason)
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + STOP_POLL_S
            try:
                if self._store.check(["stop"]):
                    self._remote = self._store.get("stop").decode()
                elif self._rank != 0 and self._store.check(["exit/n"]):
                    self._remote = "rank 0 has finished"
                if self._remote:
                    self._posted = True
                    if hasattr(self._local, "stop"):  # StopSignals: its exit code and reason follow
                        self._local.stop(self._remote)
            except Exception:  # noqa: BLE001 -- the store is gone; the waits find that out
                pass
        return self._remote

    def post(self, reason: str) -> None:
        if self._posted:
            return
        self._posted = True
        try:
            self._store.compare_set("stop", "", f"{reason} on rank {self._rank}")  # the first stop wins
        except Exception:  # noqa: BLE001
            pass
