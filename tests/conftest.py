"""Shared test set-up: hypothesis profiles and small helpers.

Profiles (choose with HYPOTHESIS_PROFILE): ``dev`` (fast, the default),
``ci`` (derandomized, used by .ci/run), ``nightly`` (many examples).
"""

import os

# One torch thread per test process: pytest-xdist already runs a worker per core, and a check's tensors are small, so
# torch's intra-op threads only contend (measured on the 2-core machine: a failing check took 18 s of CPU with two
# threads, 7 s with one). Set before torch loads; the commands the tests start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)  # in case a plugin imported torch before this file set the variables

from hypothesis import HealthCheck, settings  # noqa: E402

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("nightly", max_examples=2000, deadline=None, suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

# Checks in the tests sweep batch sizes up to 1,025 (every power-of-two class to 1,025 and both sides of the switch
# points below it: about 2,200 rows) instead of a CPU run's default 16,385 (about 48,000 rows per check of all
# families). Most tests are about a clause, a report or a command, not batch coverage; the tests of the sweep itself
# (tests/adversarial/test_no_false_pass.py) take the product's default through the ``default_sweep`` fixture.
# Set through the environment so the commands the tests start in subprocesses plan the same way.
from contracts.cases.plan import MAX_BATCH_ENV  # noqa: E402

import pytest  # noqa: E402

TEST_MAX_BATCH = "1025"
os.environ.setdefault(MAX_BATCH_ENV, TEST_MAX_BATCH)


@pytest.fixture
def default_sweep(monkeypatch):
    """The product's default ``--max-batch`` (16,385 on a CPU): for the tests of the batch-size sweep."""
    monkeypatch.delenv(MAX_BATCH_ENV, raising=False)


# The longest tests start first. Under pytest-xdist's worksteal each worker runs its share of the collection from the
# front and an idle worker steals from the back of another's; test_radix4_build.py sorts late, so its compiles (minutes
# of one core each) started in the last third of the run and the suite ended on one busy core. Seconds: each test's
# call on the 2-core host, .ci/run's --durations (2026-12-07, the heaviest under load: gfx942 322 s, sm_90 161 s).
# The tests that read the one sm_90 build of a contract (tests/test_radix4_build.py's sm90_build) follow its builder
# on the same worker: elsewhere they waited on the build's lock (46 s of one idle worker in 2026-12-07's run).
LONG_FIRST: dict[str, float] = {
    "tests/test_radix4_build.py::test_hip_source_compiles_for_gfx942_with_clang19": 136.2,
    "tests/test_radix4_build.py::test_cuda_source_builds_for_sm90_and_its_abi_checks_arguments": 113.9,
    "tests/test_radix4_build.py::test_cuda_build_spills_only_in_the_dense_kernel_and_within_budget": 113.8,
    "tests/test_radix4_build.py::test_programmatic_launch_hooks_are_in_the_sm90_code_only": 113.7,
    "tests/test_radix4_serial.py::test_serial_cuda_source_builds_for_sm90_and_its_abi_checks_arguments": 113.6,
    "tests/test_radix4_build.py::test_hip_source_compiles_with_dpp_prefix_sums_with_hipcc": 31.9,
    "tests/test_radix4_build.py::test_every_entry_serves_the_shapes_its_python_gate_names": 28.8,
    "tests/test_radix4_build.py::test_lab_build_exports_its_step_clocks": 20.0,
    "tests/test_search.py::test_search_finds_a_router_wrong_only_on_a_layout": 20.0,
}


def pytest_collection_modifyitems(items):
    def weight(item) -> float:
        return LONG_FIRST.get(item.nodeid.split("[")[0], 0.0)

    items.sort(key=lambda item: -weight(item))  # stable: the rest keep their order
