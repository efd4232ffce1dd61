"""Isolation: a candidate that crashes, hangs, aborts, exits or runs out of memory is reported, and the run goes on.

One ``contracts.check`` command names every planted misbehaving candidate
(``tests/planted``) and two healthy ones; the tests below read its bundles.
"""

import json
import subprocess
import sys

import pytest
import torch

from contracts.check import main
from contracts.run.checks import should_isolate
from contracts.candidates.fenced_call import fatal_kind
from contracts.candidates.worker import _decode_tensor, _encode_tensor
from contracts.candidates import Candidate, get_candidate
from contracts.cases.plan import pinned_rows

PLANTED = ["segfault", "hang", "abort", "oom", "exits", "wrong_device", "healthy"]
ROWS = 300  # random_bf16 plans cases of 1, 64 and 235 rows, then its pinned dtype and layout cases (plan.pinned_specs)


def _bundle_name(module):
    from contracts.run.checks import bundle_dirname

    return bundle_dirname(f"tests.planted.{module}:route")


@pytest.fixture(scope="module")
def acceptance(tmp_path_factory):
    out = tmp_path_factory.mktemp("acceptance")
    names = ",".join(f"tests.planted.{m}:route" for m in PLANTED) + ",oracle"
    before = set(sys.modules)
    code = main(["--candidate", names, "--families", "random_bf16", "--rows", str(ROWS), "--timeout", "3", "--out", str(out), "--quiet"])
    imported_here = {m for m in set(sys.modules) - before if m.startswith("tests.planted")}
    summaries = {json.loads(p.read_text())["candidate"]: json.loads(p.read_text()) for p in out.glob("*/summary.json")}
    return code, out, summaries, imported_here


def _summary(acceptance, module):
    return acceptance[2][f"tests.planted.{module}:route"]


@pytest.mark.slow  # waits out a hung worker's timeout and starts four workers: ~20 s
def test_one_command_with_a_crash_a_hang_and_healthy_candidates_completes_and_exits_1(acceptance):
    code, out, summaries, _ = acceptance
    assert code == 1
    index = json.loads((out / "index.json").read_text())
    status = {c["candidate"]: c["status"] for c in index["candidates"]}
    assert status["tests.planted.segfault:route"] == "error"
    assert status["tests.planted.hang:route"] == "error"
    assert status["oracle"] == "pass" and status["tests.planted.healthy:route"] == "pass"
    from contracts.cases.plan import planned_rows

    assert summaries["oracle"]["rows_checked"] == planned_rows(["random_bf16"], ROWS, max_batch=1025, experts=896, topk=16, contract="aiter")  # every planned row, pinned ones too
    assert summaries["tests.planted.healthy:route"]["rows_checked"] == summaries["oracle"]["rows_checked"]


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_segfault_is_an_error_with_the_signal_the_case_and_the_stack(acceptance):
    s = _summary(acceptance, "segfault")
    err = s["error"]
    assert s["status"] == "error" and err["kind"] == "crash" and "SIGSEGV" in err["message"]
    assert s["rows_checked"] == 1 + 64  # the two calls before the crash are kept
    assert err["case"].startswith("random_bf16:") and err["case"].endswith(":235")
    assert "--replay " + err["case"] in err["replay"]
    assert "segfault.py" in err["stderr_tail"]  # faulthandler's Python stack of the worker
    report = (acceptance[1] / _bundle_name("segfault") / "report.md").read_text()
    assert report.startswith("# ERROR") and "SIGSEGV" in report


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_hang_is_killed_after_the_timeout_and_shows_where_it_hung(acceptance):
    s = _summary(acceptance, "hang")
    assert s["status"] == "error" and s["error"]["kind"] == "timeout"
    assert "--timeout 3 s" in s["error"]["message"] and s["rows_checked"] == 65
    assert "hang.py" in s["error"]["stderr_tail"]


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_abort_is_an_error_with_sigabrt(acceptance):
    s = _summary(acceptance, "abort")
    assert s["status"] == "error" and s["error"]["kind"] == "crash" and "SIGABRT" in s["error"]["message"]
    assert s["rows_checked"] == 1


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_running_out_of_memory_is_an_error_not_a_finding(acceptance):
    s = _summary(acceptance, "oom")
    assert s["status"] == "error" and s["error"]["kind"] == "out_of_memory"
    assert "allocate" in s["error"]["message"]


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_sys_exit_inside_a_candidate_is_an_error(acceptance):
    s = _summary(acceptance, "exits")
    assert s["status"] == "error" and s["error"]["kind"] == "exit"


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_outputs_on_the_wrong_device_are_a_validity_finding(acceptance, tmp_path):
    s = _summary(acceptance, "wrong_device")
    assert s["status"] == "fail" and s["clauses"]["validity"] == s["rows_checked"] == ROWS + pinned_rows("random_bf16", 1025, experts=896, topk=16, contract="aiter")
    report = (acceptance[1] / _bundle_name("wrong_device") / "report.md").read_text()
    assert "outputs on meta/meta; the inputs were on cpu" in report
    # the same finding without a worker
    out = tmp_path / "in-process"
    code = main(["--candidate", "tests.planted.wrong_device:route", "--no-isolate", "--families", "random_bf16", "--rows", "70", "--out", str(out), "--quiet"])
    local = json.loads((out / "summary.json").read_text())
    assert code == 1 and local["status"] == "fail" and local["clauses"]["validity"] == local["rows_checked"] == 70 + pinned_rows("random_bf16", 1025, experts=896, topk=16, contract="aiter")
    assert not local["isolated"] and s["isolated"]


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_isolated_and_in_process_runs_give_the_same_counts(acceptance, tmp_path):
    isolated = _summary(acceptance, "healthy")
    out = tmp_path / "in-process"
    assert main(["--candidate", "tests.planted.healthy:route", "--no-isolate", "--families", "random_bf16", "--rows", str(ROWS), "--out", str(out), "--quiet"]) == 0
    local = json.loads((out / "summary.json").read_text())
    for key in ("rows_checked", "mismatched_rows", "exact_rows", "within_tolerance_rows", "near_tie_rows", "clauses", "families"):
        assert local[key] == isolated[key], key


@pytest.mark.slow  # reads the module's one command (every planted candidate in its worker, a hang waited out): ~20 s, paid by the first
def test_the_parent_never_imports_an_isolated_candidate(acceptance):
    assert acceptance[3] == set()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU host these candidates really run")
def test_gpu_candidates_are_not_imported_by_the_parent(tmp_path):
    code = (
        "import sys; from contracts.check import main\n"
        f"rc = main(['--candidate', 'radix4,block-argmax', '--rows', '10', '--out', {str(tmp_path)!r}, '--quiet'])\n"
        "print(rc, sorted(m for m in sys.modules if m.startswith(('kernels.radix4', 'kernels.serial', 'aiter'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "3 []", done.stdout + done.stderr


def test_isolation_defaults():
    class Args:
        isolate = None

    oracle_c = get_candidate("oracle")
    third = Candidate(name="x", route=lambda *a: None, third_party=True, origin="mypkg.router:route")
    gpu_only = get_candidate("radix4")
    assert should_isolate(Args.isolate, oracle_c, "cpu", None)  # every candidate runs in a worker by default (issue 32)
    assert should_isolate(Args.isolate, oracle_c, "cuda", None)
    assert should_isolate(Args.isolate, third, "cpu", None)
    assert should_isolate(Args.isolate, gpu_only, "cuda", None)
    assert should_isolate(Args.isolate, oracle_c, "cpu", third)  # the --against candidate runs in the worker too
    # registered at run time with nothing to import: a worker cannot find it, so it runs where it was registered
    assert not should_isolate(None, Candidate(name="made-here", route=lambda *a: None), "cpu", None)
    Args.isolate = False
    assert not should_isolate(Args.isolate, third, "cuda", None)
    assert not should_isolate(Args.isolate, oracle_c, "cpu", None)
    Args.isolate = True
    assert should_isolate(Args.isolate, oracle_c, "cpu", None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.float16])
@pytest.mark.parametrize("shape", [(3, 4), (0, 16), (), (5,)])
def test_tensors_cross_the_pipe_bit_for_bit(dtype, shape):
    t = (torch.randn(shape) * 100).to(dtype)
    if dtype == torch.float32 and t.numel():
        t.view(-1)[0] = float("nan")
    back = _decode_tensor(_encode_tensor(t))
    assert back.dtype == t.dtype and back.shape == t.shape
    assert torch.equal(back.view(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))


def test_fatal_kinds():
    assert fatal_kind(MemoryError()) == "out_of_memory"
    assert fatal_kind(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "out_of_memory"
    assert fatal_kind(RuntimeError("CUDA error: an illegal memory access was encountered")) == "cuda_error"
    assert fatal_kind(SystemExit(3)) == "exit"
    assert fatal_kind(RuntimeError("planted failure")) is None
    assert fatal_kind(ValueError("out of memory")) is None  # only allocator errors, not any message


@pytest.mark.slow  # a worker process importing torch and a candidate that takes a second to import: ~5 s of CPU
def test_a_build_inside_the_worker_is_told_on_the_parents_console(capfd):
    # the README's main job on a GPU host said nothing for minutes while radix4 built in its worker (a file takes the
    # worker's stderr): the build's own lines are passed on as they come, the candidate's other stderr is not
    from contracts.candidates.worker import Worker

    with Worker("tests.planted.builds_noisily:route", timeout=30) as worker:
        worker.describe()
    err = capfd.readouterr().err
    assert "kernels: building fake.cu with fakecc (-arch=sm_90)" in err and "kernels: built fake.cu" in err, err
    assert "some other chatter" not in err, err
