"""Held-out holes of the numeric and digest options (issue 55's red-team pass): every bad value is one line, exit 2,
naming the option, before anything runs; every value a check accepts is one its own summary.json reader reads back;
``--plan`` says which switch points no call reaches."""

from __future__ import annotations

import json

import pytest

from contracts.commands import main as contracts_main

ONE_OF_EACH = ["1e400", "-1e400", "inf", "-inf", "nan", "-0", "-0.0", "99999999999999999999999", "-99999999999999999999999"]

# (the command's required words, the numeric option) for every numeric option of every command
NUMERIC = [
    (["check", "--candidate", "oracle"], o) for o in ("--rows", "--seed", "--experts", "--topk", "--row", "--timeout", "--repeat", "--max-batch")
] + [
    (["matrix", "--candidate", "oracle,torch-native"], o) for o in ("--rows", "--seed", "--experts", "--topk", "--row", "--timeout", "--max-batch")
] + [
    (["nightly"], o) for o in ("--rows", "--seed", "--latency-threshold")
] + [
    (["bench", "--candidate", "oracle"], o) for o in ("--m", "--seed", "--experts", "--topk", "--replays", "--launches", "--warmup", "--repeats", "--rotate")
] + [
    (["probe", "--candidate", "oracle"], o) for o in ("--seed", "--experts", "--topk", "--batch-sizes")
] + [
    (["search", "--candidate", "oracle"], o) for o in ("--seed", "--examples")
] + [
    (["trace-diff", "a.pt", "b.pt", "--contract", "aiter"], o) for o in ("--layer", "--token")
] + [
    (["diff", "old", "new"], "--latency-threshold"),
]  # fmt: skip

# values some options take (a seed may be 0 or negative; a threshold 0; a row or layer 0): not bad for them
# (a threshold of 1e23 is finite: latency may grow that much; a test of it would run a whole nightly, minutes)
ACCEPTED = {"--seed": {"-0", "-0.0"}, "--latency-threshold": {"-0", "-0.0", "99999999999999999999999"}, "--row": {"-0"}, "--layer": {"-0"},
            "--token": {"-0"}}  # fmt: skip


def _answer(capsys, argv):
    try:
        code = contracts_main(argv)
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("words, option", NUMERIC, ids=[f"{w[0]}{o}" for w, o in NUMERIC])
def test_every_numeric_option_refuses_out_of_range_values_in_one_line(tmp_path, capsys, words, option):
    """Huge integers, floats past float range (1e400), nan/inf and negative zero: one line naming the option, exit 2.
    Before: --rows 1e400 a traceback (OverflowError), --seed 1e23 a bundle its reader refused, nightly's
    --latency-threshold nan/-1 taken (nan compares as no regression at any growth)."""
    bad = [v for v in ONE_OF_EACH if v not in ACCEPTED.get(option, set())]
    for value in bad:
        code, err = _answer(capsys, [*words, f"{option}={value}", "--out", str(tmp_path / "out")] if words[0] not in ("diff",) else [*words, f"{option}={value}"])
        assert code == 2, (option, value, code, err)
        assert option in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, (option, value, err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["1e400", "1e400k", "inf", "nan", "-0", "-0.0", "0.5", "1e13.5", "10000000000001", "1.5e13"])
def test_rows_refuses_every_non_finite_or_out_of_range_value(value):
    import argparse

    from contracts.commands._common import row_count

    with pytest.raises(argparse.ArgumentTypeError):
        row_count(value)


def test_rows_still_takes_suffixes_and_e_notation():
    from contracts.commands._common import row_count

    assert [row_count(v) for v in ("1", "100k", "100M", "1G", "1e9", "1e13", "10_000")] == [1, 10**5, 10**8, 10**9, 10**9, 10**13, 10**4]


def _extremes(parser, option: str, candidates: list[str]) -> list[object]:
    """The values of ``candidates`` the parser accepts for ``option`` (the extremes of its range)."""
    values = []
    for text in candidates:
        try:
            args = parser.parse_args(["--candidate", "oracle", option, text])
        except Exception:  # noqa: BLE001 -- refused: not an accepted extreme
            continue
        values.append(getattr(args, option[2:].replace("-", "_")))
    return values


def test_the_extreme_accepted_value_of_every_numeric_check_option_reads_back_from_summary_json(tmp_path):
    """Every numeric option of check written to summary.json (seed as its own field, the rest under ``options``) at the
    largest and smallest value the parser accepts: the record written parses back through the schema's reader with
    the same value, and one past the range is refused by the parser. Before: --seed 2**70 ran, exit 0, and its bundle's
    reader refused it ("field seed ... out of range")."""
    from contracts.commands._common import INT64_MAX, INT64_MIN, MAX_EXPERTS
    from contracts.commands.check import build_parser
    from contracts.reports.json_records import from_json, to_json
    from contracts.reports.schema import INT64_MAX as RECORD_MAX
    from contracts.reports.schema import Status, Summary
    from contracts.run.options import CheckOptions

    assert INT64_MAX == RECORD_MAX
    parser = build_parser()
    ranges = {
        "--seed": (INT64_MIN, INT64_MAX), "--rows": (1, 10**13), "--experts": (1, MAX_EXPERTS), "--topk": (1, MAX_EXPERTS),
        "--repeat": (1, INT64_MAX), "--max-batch": (1, 1 << 20), "--row": (0, INT64_MAX),
    }  # fmt: skip
    for option, (low, high) in ranges.items():
        texts = [str(low), str(high), str(low - 1), str(high + 1), str(high * 2**64)]
        accepted = _extremes(parser, option, texts)
        assert accepted == [low, high], (option, accepted)
    timeouts = _extremes(parser, "--timeout", ["1e-300", "9223372036", "1e300", "1e400", "nan"])
    assert len(timeouts) == 2, timeouts
    for seed in (INT64_MIN, INT64_MAX):
        for big in (ranges["--experts"][1], 1):
            recorded = CheckOptions(rows=10**13, seed=seed, experts=big, topk=big, repeat=INT64_MAX, timeout=max(timeouts),
                                    max_batch=1 << 20).recorded  # fmt: skip
            recorded["max_batch"] = 1 << 20
            s = Summary(candidate="oracle", status=Status.PASS, seed=seed, options=recorded)
            data = json.loads(json.dumps(to_json(s)))
            back = from_json(Summary, data, "summary.json")
            assert back.seed == seed and back.options == recorded, (back.seed, back.options)


@pytest.mark.parametrize("seed", [2**63 - 1, -(2**63)])
def test_a_check_at_the_extreme_seed_writes_a_bundle_its_reader_opens(tmp_path, capsys, seed):
    from contracts.reports.bundle import open_check

    out = tmp_path / "out"
    code = contracts_main(["check", "--candidate", "oracle", "--rows", "20", "--max-batch", "4", "--families", "random_fp32",
                           "--seed", str(seed), "--quiet", "--no-isolate", "--out", str(out)])  # fmt: skip
    capsys.readouterr()
    assert code in (0, 5), code
    assert open_check(out) is not None


# ---------------------------------------------------------------- --logits-sha256 / --bias without --logits


@pytest.mark.parametrize("command", [["check", "--candidate", "oracle", "--plan"], ["check", "--candidate", "oracle"],
                                     ["matrix", "--candidate", "oracle,torch-native"]], ids=["check-plan", "check", "matrix"])  # fmt: skip
@pytest.mark.parametrize("extra, option", [(["--logits-sha256", "zz"], "--logits-sha256"), (["--logits-sha256", "0123456789abcdef0"], "--logits-sha256"),
                                           (["--logits-sha256", "ab" * 33], "--logits-sha256"), (["--logits-sha256", "0123"], "--logits-sha256"),
                                           (["--bias", "bias.pt"], "--bias")])  # fmt: skip
def test_a_digest_that_is_no_sha256_or_one_without_logits_is_one_line(tmp_path, capsys, command, extra, option):
    """``--logits-sha256 zz`` (not hex), 4 or 66 digits (no SHA-256 prefix a replay line writes), or a good digest or
    --bias without --logits: one line naming it, exit 2. Before: check --plan printed the synthetic plan, exit 0."""
    code, err = _answer(capsys, [*command, *extra, "--rows", "20", "--out", str(tmp_path / "out")])
    assert code == 2 and option in err, (code, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_full_or_replay_length_digest_is_taken():
    from contracts.commands._common import sha256_prefix

    assert sha256_prefix("AB" * 32) == "ab" * 32 and sha256_prefix("0123456789abcdef") == "0123456789abcdef"


# ---------------------------------------------------------------- --plan: switch points beyond the largest call


def test_plan_says_which_switch_points_no_call_reaches(capsys):
    """aiter's switch point 3465 under --max-batch 3000 at --rows 2000: no call has more than 3,000 rows, so the launch
    class from 3465 up is never exercised. Before, --plan listed 3465 among the switch points as if it were reached."""
    code = contracts_main(["check", "--candidate", "oracle", "--contract", "aiter", "--max-batch", "3000", "--rows", "2000", "--plan"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    line = next(x for x in captured.out.splitlines() if x.startswith("batch sizes of the calls"))
    assert "3,465 beyond the largest call, 3,000 rows: not reached" in line, line
    assert "warning: the launch class from 3,465 rows up is never exercised" in captured.err, captured.err
    code = contracts_main(["check", "--candidate", "oracle", "--contract", "aiter", "--max-batch", "4096", "--rows", "2000", "--plan"])
    captured = capsys.readouterr()
    assert code == 0 and "not reached" not in captured.out and "never exercised" not in captured.err, captured
