"""One run over many processes, GPUs or hosts with torchrun: each rank checks its shard, rank 0 writes one bundle.

This module is the plumbing (joining the world, the gather, stops and exit codes); where a process
stands is ``contracts.run.world``, the store's values, heartbeats and shared stop ``contracts.run.rank_store``,
and the merge of the ranks' records into one ``contracts.run.rank_merge``.

``torchrun --nproc-per-node N -m contracts check ...`` (or ``nightly``,
``search``) starts N copies of the command. Each finds its place in the
world from the environment torchrun sets:

======================================  ============================================================
``RANK``, ``WORLD_SIZE``                this process's rank, and the number of ranks (> 1: distributed)
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``    the rank on this host, and the ranks per host; LOCAL_RANK picks the GPU
``GROUP_RANK``                          the host's (node's) rank
``MASTER_ADDR``, ``MASTER_PORT``        the c10d TCPStore that every rank connects to
``TORCHELASTIC_USE_AGENT_STORE``        ``True``: torchrun's agent hosts that store; otherwise rank 0 hosts it
``TORCHELASTIC_RUN_ID``,                keep the keys of one run, and of each restart, apart
``TORCHELASTIC_RESTART_COUNT``
======================================  ============================================================

What each rank does:

- **GPU**: before CUDA starts, ``CUDA_VISIBLE_DEVICES`` is narrowed to the
  LOCAL_RANK-th visible GPU, so ``cuda`` in the rank and in its isolated
  candidate workers is that GPU (``ranks[].device`` records it as ``cuda:N``).
- **Cases**: the same interleaved split as ``--shard``
  (``contracts.cases.shard``); a user ``--shard I/N`` composes with it: rank r
  of W takes shard ``I + N*r`` of ``N*W``, so the W ranks together run
  exactly shard I/N.
- **Records**: rank 0 collects every rank's ``CheckResult`` and writes one
  bundle whose counts are those of a one-process run with the same seed;
  the summary adds ``world_size`` and ``ranks`` (per rank: host, device,
  rows checked, status, seconds). Other ranks write nothing and print
  nothing to stdout.

How records travel: through the c10d ``TCPStore`` at MASTER_ADDR:MASTER_PORT
(a gloo process group is also set up on it, so that the world is a normal
torch.distributed world, and its set-up is the start barrier), never through
a collective that a dead rank could block. Each rank beats a heartbeat
counter every ``HEARTBEAT_S``; a rank whose counter stops moving for
``LOST_AFTER_S`` is lost. Waits end when the awaited record arrives, when
the peer is lost, or when the peer says it has left, so a dead rank cannot
hang rank 0, and rank 0 still writes the bundle:

- a lost rank (killed, out of memory, a segfault, host gone) becomes an ``error`` record
  naming the rank and its host; the other ranks' rows are kept. torchrun
  stops the surviving ranks with SIGTERM when one dies; they stop after their
  current case and still send what they checked, and the status is ``error``
  (the death is the cause), not ``interrupted``.
- a rank whose command raises sends the traceback before it leaves (status
  ``error``, naming the rank), and waits for rank 0 so the others can finish.
- a stop (SIGINT/SIGTERM) on any rank is posted to the store; every rank
  stops after its current case, and rank 0 writes an ``interrupted`` bundle.

Every rank ends with rank 0's exit code (torchrun itself exits 1 if any rank
exits non-zero). ``docs/nightly.md`` has the launch lines for one host and for
several.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import sys
import time
import traceback
from typing import Any, Callable, Mapping

from ..reports.schema import CheckResult, ErrorRecord
from .rank_merge import Part, combine_checks
from .rank_store import Heartbeat, SharedStop, has, put, store_error, take
from .world import OneProcess, World, WorldError, gpu_for

__all__ = ["JOIN_TIMEOUT_S", "LOST_AFTER_S", "RankGroup", "RankReleased", "ranked"]

# Well under torchrun's 30 s between its SIGTERM and its SIGKILL: when one rank
# dies, rank 0 must find out, and write the bundle, inside that grace period.
LOST_AFTER_S = 10.0
JOIN_TIMEOUT_S = 300.0  # every rank must reach the store and the process group within this
POLL_S = 0.1
_USAGE = 2  # the commands' exit code for a usage error (commands._common.ExitCode.USAGE; run/ does not import commands/)


class RankReleased(BaseException):
    """Rank 0 has finished (or is gone): this rank has nothing more to do.

    A BaseException, like SystemExit, so that the harness's own catch-alls
    (one failing check must not lose the others) let it through.
    """


class RankGroup:
    """A joined torchrun world (``join``): the shared store, the heartbeat, the process group, the gathers."""

    def __init__(self, world: World, store, heartbeat: Heartbeat, stop: SharedStop, gpu: str | None):
        self.world = world
        self.rank, self.world_size, self.writer = world.rank, world.world_size, world.rank == 0
        self.host = platform.node()
        self.gpu = gpu
        self.stop = stop
        self._store = store
        self._heartbeat = heartbeat
        self._seq = 0
        self._info: dict[int, dict] = {}
        self._left: dict[int, dict] = {}

    # -------------------------------------------------------- joining and leaving
    @classmethod
    def join(cls, world: World, stop: Callable[[], object], options: Mapping[str, object] | None = None) -> "RankGroup":
        """Pin the GPU, connect to the store, set up the gloo process group, start the heartbeat.

        ``options``: this rank's verdict options (see ``ranked``), published with its info for the others to compare.
        """
        import torch
        import torch.distributed as dist

        if torch.cuda.is_initialized():  # the narrowing below would not apply: every rank would use the same GPU
            raise WorldError(f"rank {world.rank}: CUDA was started before the rank chose its GPU (LOCAL_RANK {world.local_rank}); "
                             "nothing may touch the GPU before contracts.run.distributed.ranked() runs")  # fmt: skip
        gpu = gpu_for(world.local_rank, os.environ)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu if gpu is not None else ""  # before anything starts CUDA

        timeout = dt.timedelta(seconds=JOIN_TIMEOUT_S)

        def connect(master: bool = False):
            return dist.TCPStore(world.master_addr, world.master_port, world_size=world.world_size if master else None,
                                 is_master=master, timeout=timeout, wait_for_workers=False)  # fmt: skip

        where = f"{world.master_addr}:{world.master_port}"
        try:
            base = connect(master=world.rank == 0 and not world.agent_store)
        except Exception as exc:  # noqa: BLE001 -- torch raises several kinds; one line says what to check
            raise WorldError(f"rank {world.rank} could not reach the store at {where} (MASTER_ADDR:MASTER_PORT) within "
                             f"{JOIN_TIMEOUT_S:g} s: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None  # fmt: skip
        attempt = f"router-contracts/{world.run_id}/{world.restart}"
        # The n-th command a rank runs in this attempt (a script may run several under one torchrun).
        session = base.add(f"{attempt}/commands/{world.rank}", 1)
        prefix = f"{attempt}/{session}/"
        store = dist.PrefixStore(prefix, base)
        put(store, f"info/{world.rank}", {"host": platform.node(), "pid": os.getpid(), "local_rank": world.local_rank,
                                           "node_rank": world.node_rank, "gpu": gpu,
                                           "options": dict(options) if options is not None else None})  # fmt: skip
        if not dist.is_initialized():
            try:  # every rank must arrive: this is the start barrier
                dist.init_process_group("gloo", store=dist.PrefixStore(prefix + "process_group/", base), rank=world.rank,
                                        world_size=world.world_size, timeout=timeout)  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                raise WorldError(f"rank {world.rank}: the {world.world_size} ranks did not all join the gloo process group "
                                 f"at {where} within {JOIN_TIMEOUT_S:g} s ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''}); on several hosts, GLOO_SOCKET_IFNAME "
                                 "names the network interface to use") from None  # fmt: skip
        watched = [r for r in range(world.world_size) if r != world.rank] if world.rank == 0 else [0]
        heartbeat = Heartbeat(lambda: dist.PrefixStore(prefix, connect()), world.rank, watched)
        heartbeat.start()
        return cls(world, store, heartbeat, SharedStop(stop, store, world.rank), gpu)

    def close(self) -> None:
        import torch.distributed as dist

        self._heartbeat.close()
        if dist.is_initialized():
            dist.destroy_process_group()

    def info(self, rank: int) -> dict:
        if rank not in self._info:
            try:
                self._info[rank] = take(self._store, f"info/{rank}", delete=False)
            except Exception:  # noqa: BLE001
                self._info[rank] = {"host": "?", "pid": None, "gpu": None}
        return self._info[rank]

    def _where(self, rank: int) -> str:
        info = self.info(rank)
        return f"rank {rank} (host {info['host']}, pid {info['pid']})"

    def differing_options(self) -> str | None:
        """Why the ranks cannot make one run, when their verdict options differ from rank 0's; None when they agree.

        Every rank reads every rank's options, so each comes to the same answer without a further exchange.
        """
        first = self.info(0).get("options") if self._wait(lambda: has(self._store, "info/0"), 0) == "ready" else None
        if first is None:
            return None
        found = []
        for r in range(1, self.world_size):
            if self._wait(lambda r=r: has(self._store, f"info/{r}"), r) != "ready":
                continue  # a lost rank is reported where its record is missing
            other = self.info(r).get("options")
            if other is None:
                continue
            for name in sorted(set(first) | set(other)):
                if first.get(name, _UNSET) != other.get(name, _UNSET):
                    found.append(f"{name} is {_shown(other, name)} on rank {r} (host {self.info(r)['host']}) "
                                 f"but {_shown(first, name)} on rank 0")  # fmt: skip
        if not found:
            return None
        return ("the torchrun ranks were started with different options, so their shards are not slices of one run and "
                f"nothing was checked: {'; '.join(found)}; start every rank with the same options")  # fmt: skip

    # -------------------------------------------------------- the cases of this rank
    def shard(self, user: tuple[int, int] | None) -> tuple[int, int]:
        return self.world.shard_of(self.rank, user)

    def runs_replay(self) -> bool:
        """A replay is one case: rank 0 runs it, the others run nothing."""
        return self.rank == 0

    # -------------------------------------------------------- gathering
    def _wait(self, ready: Callable[[], bool], peer: int, *, on_left: bool = True, on_exit: bool = False) -> str:
        """Wait until ``ready()``: ``"ready"``; ``"left"`` (the peer's command ended), ``"exit"`` (rank 0 posted its
        exit code), or ``"lost"`` (the peer is silent, or the store is gone) end the wait sooner."""
        while True:
            try:
                if ready():
                    return "ready"
                if on_left and self._store.check([f"left/{peer}/n"]):
                    return "left"
                if on_exit and self._store.check(["exit/n"]):
                    return "exit"
            except Exception as exc:  # noqa: BLE001
                if store_error(exc):
                    return "lost"
                raise
            if self._heartbeat.silent_for(peer) > LOST_AFTER_S:
                return "lost"
            time.sleep(POLL_S)

    def _left_record(self, rank: int) -> dict:
        if rank not in self._left:
            try:
                self._left[rank] = take(self._store, f"left/{rank}", delete=False)
            except Exception:  # noqa: BLE001
                self._left[rank] = {}
        return self._left[rank]

    def gather(self, label: str, value) -> list[Part] | None:
        """Every rank's ``value`` for the same step (``label`` names it); the list on rank 0, None elsewhere."""
        self._seq += 1
        key = f"part/{self._seq}"
        device = getattr(value, "summary", None) and value.summary.device or ""
        mine = {"label": label, "value": value, "host": self.host, "device": self._device(device)}
        if self.rank != 0:
            put(self._store, f"{key}/{self.rank}", mine)
            return None
        parts = [Part(0, self.host, mine["device"], value)]
        for r in range(1, self.world_size):
            parts.append(self._collect(key, r, label, kind=mine["device"].split(":")[0]))
        return parts

    def _device(self, device: str, gpu: str | None = None) -> str:
        gpu = self.gpu if gpu is None else gpu
        if device.startswith("cuda") and gpu is not None:
            return f"cuda:{gpu}"
        return device or "cpu"

    def _collect(self, key: str, r: int, label: str, kind: str) -> Part:
        """Rank ``r``'s record for this gather; a ``Part`` that says why there is none (lost, raised, stopped, diverged)."""
        host = self.info(r)["host"]
        device = self._device(kind, self.info(r).get("gpu"))  # the device it was to use, for records it did not send
        try:
            how = self._wait(lambda: has(self._store, f"{key}/{r}"), r)
            if how == "ready":
                got = take(self._store, f"{key}/{r}")
                if got["label"] != label:
                    message = f"rank {r} sent its record for {got['label']!r} where rank 0 gathered {label!r}: the ranks ran different steps"
                    return Part(r, host, got["device"], missing="diverged", error=ErrorRecord("rank_diverged", f"rank {r}", message))
                return Part(r, got["host"], got["device"], got["value"])
        except KeyboardInterrupt:  # a second signal on rank 0 while it waits: write what came
            return Part(r, host, device, missing="stopped", stopped=f"not collected: rank 0 was interrupted while waiting for rank {r}")
        if how == "lost":
            gone = self._heartbeat.store_gone
            why = (f"the shared store is gone ({gone}): the launcher ended" if gone
                   else f"no heartbeat for {LOST_AFTER_S:g} s")  # fmt: skip
            message = (f"{self._where(r)} was lost before it sent its record for {label!r} ({why}): it died or its host "
                       "went away, and its share of the cases is not in these counts; torchrun's log names its exit code")  # fmt: skip
            return Part(r, host, device, missing="lost", error=ErrorRecord("rank_lost", f"rank {r}", message))
        left = self._left_record(r)
        if left.get("error"):
            e = left["error"]
            message = f"{self._where(r)} raised {e['type']}: {e['message']}; its share of the cases is not in these counts"
            return Part(r, host, device, missing="raised", error=ErrorRecord("rank_exception", f"rank {r}", message, e["traceback"]))
        if left.get("stopped"):
            return Part(r, host, device, missing="stopped", stopped=f"rank {r} was stopped ({left['stopped']}) before it ran {label!r}")
        message = f"{self._where(r)} finished its command without running {label!r}: the ranks ran different steps"
        return Part(r, host, device, missing="finished", error=ErrorRecord("rank_diverged", f"rank {r}", message))

    def gather_check(self, result: CheckResult) -> CheckResult:
        """One check's results from every rank as one: the whole record on rank 0, its summary on the others.

        Every rank gets the combined summary back, so what each does next (a
        nightly's pairs, the exit code) is decided on the same facts.
        """
        parts = self.gather(result.summary.label, result)
        key = f"whole/{self._seq}"
        if parts is not None:
            combined = combine_checks(parts, world=self.world)
            put(self._store, key, combined.summary)
            return combined
        how = self._wait(lambda: has(self._store, key), 0, on_left=False, on_exit=True)
        if how == "ready":
            return CheckResult(take(self._store, key, delete=False))
        raise RankReleased(how)

    # -------------------------------------------------------- ending
    def leave(self, *, code: int | None = None, error: BaseException | None = None) -> None:
        """Say that this rank's command ended (with its error, if it raised)."""
        record: dict = {"code": code}
        if isinstance(error, KeyboardInterrupt):
            record["stopped"] = "KeyboardInterrupt"
        elif error is not None:
            record["error"] = {"type": type(error).__name__, "message": str(error).splitlines()[0] if str(error) else "",
                               "traceback": "".join(traceback.format_exception(error))[-8000:]}  # fmt: skip
        elif self.stop():
            record["stopped"] = self.stop()
        try:
            put(self._store, f"left/{self.rank}", record)
            if self.rank == 0:
                put(self._store, "exit", 1 if code is None else code)
        except Exception:  # noqa: BLE001 -- the store is gone; nobody is waiting any more
            pass

    def outcome(self, code: int | None) -> int:
        """The command's exit code: rank 0's, on every rank. Rank 0 waits for the others to read it before it goes."""
        if self.rank == 0:
            for r in range(1, self.world_size):
                self._wait(lambda r=r: self._store.check([f"bye/{r}"]), r, on_left=False)
            return 1 if code is None else code
        how = self._wait(lambda: self._store.check(["exit/n"]), 0, on_left=False)
        if how != "ready":
            print(f"rank {self.rank}: rank 0 was lost before it wrote the bundle; this rank's results are in no bundle", file=sys.stderr)
            return 1
        try:
            exit_code = int(take(self._store, "exit", delete=False))
            self._store.set(f"bye/{self.rank}", "1")
        except Exception:  # noqa: BLE001
            return 1
        return exit_code


# ---------------------------------------------------------------- running a command on every rank


_UNSET = object()


def _shown(options: Mapping[str, object], name: str) -> str:
    return "not given" if name not in options else repr(options[name])


def _ignore_signals(stop) -> None:
    """The work is done: when one rank exits non-zero torchrun SIGTERMs the others, which must not break off their ending."""
    if hasattr(stop, "writing"):  # StopSignals: no KeyboardInterrupt on a further signal
        stop.writing = True


def ranked(body: Callable[[Any], int], *, stop: Callable[[], object], env: Mapping[str, str] | None = None,
           options: Mapping[str, object] | None = None) -> int:
    """Run a command's ``body(world)`` here: once, or as this rank of a torchrun world; the exit code.

    ``world`` is ``OneProcess`` without torchrun, else a joined ``RankGroup``
    (``world.stop`` is the shared stop to pass on). Under torchrun, ranks
    other than 0 print nothing to stdout, and every rank returns rank 0's code.

    ``options``: the command's options that change its verdict (flag -> value). Ranks whose options differ
    from rank 0's (a ``--seed``, ``--contract`` or ``--exact`` of their own) would check slices of different
    runs: then no rank runs ``body``, rank 0 prints one error line naming each differing option, and every rank
    returns 2 (a usage error).
    """
    world = World.from_env(env)
    if world is None:
        return body(OneProcess(stop))
    group = RankGroup.join(world, stop, options)
    quiet = None
    try:
        differs = group.differing_options()
        if differs is not None:
            _ignore_signals(stop)  # torchrun SIGTERMs rank 0 once another rank has ended: the line is out by then
            if group.rank == 0:  # printed before the exit code is posted, so before any other rank can end
                print(f"error: {differs}", file=sys.stderr, flush=True)
            group.leave(code=_USAGE)
            return group.outcome(_USAGE)
        quiet = open(os.devnull, "w") if group.rank != 0 else None
        with contextlib.redirect_stdout(quiet) if quiet else contextlib.nullcontext():
            try:
                code = body(group)
            except RankReleased:
                code = None
            except BaseException as exc:
                _ignore_signals(stop)
                if group.rank == 0:
                    group.stop.post(f"rank 0 failed ({type(exc).__name__})")
                    group.leave(code=1, error=exc)
                    group.outcome(1)
                else:
                    group.leave(error=exc)
                    group.outcome(None)  # wait for rank 0, so the other ranks' work is not cut short
                raise
            _ignore_signals(stop)
            group.leave(code=code)
            return group.outcome(code)
    finally:
        if quiet is not None:
            quiet.close()
        group.close()
