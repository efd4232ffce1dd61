"""merge exits with the worst status it merged, as check does (issue 55: every command's exit code is the worst status
it saw): a merged FAIL is never exit 0."""

import pytest

from contracts import check
from contracts.commands import merge


def _shard(out, candidate, i, *extra):
    return check.main(["--candidate", candidate, "--rows", "60", "--families", "random_fp32", "--seed", "3", "--device", "cpu",
                       "--no-isolate", "--shard", f"{i}/2", "--out", str(out), "--quiet", *extra])  # fmt: skip


@pytest.mark.slow  # two sharded failing checks and their merge (15-34 s)
def test_a_merged_fail_exits_1(tmp_path, capsys):
    shards = [tmp_path / f"s{i}" for i in (1, 2)]
    codes = [_shard(out, "tests.broken_candidates:scaled_twice", i) for i, out in zip((1, 2), shards)]
    assert codes == [1, 1]
    assert merge.main([str(tmp_path / "merged"), *map(str, shards)]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_a_merged_pass_exits_0(tmp_path):
    shards = [tmp_path / f"s{i}" for i in (1, 2)]
    assert [_shard(out, "torch-native", i) for i, out in zip((1, 2), shards)] == [0, 0]
    assert merge.main([str(tmp_path / "merged"), *map(str, shards)]) == 0
