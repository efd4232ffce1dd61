"""``python -m contracts contracts``: every built-in contract on one line; one contract's fields and clauses."""

from __future__ import annotations

import oracle
from contracts.commands import main


def test_lists_every_builtin_contract_on_one_line(capsys):
    assert main(["contracts"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["contract", "E"] and len(lines) == 1 + len(oracle.BUILTIN_CONTRACTS)
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert set(by_name) == set(oracle.BUILTIN_CONTRACTS)
    assert "160 / 6" in by_name["deepseek-v2"] and "8 / 3 max mask 0" in by_name["deepseek-v2"]
    assert "sqrt_softplus + bias" in by_name["deepseek-v4"] and "DeepseekV4TopKRouter" in by_name["deepseek-v4"]
    assert "768 / 12 (256 zero)" in by_name["longcat-flash"] and "renorm off, rsf 1" in by_name["llama4"]


def test_shows_one_contract_and_refuses_an_unknown_name_in_one_line(capsys):
    assert main(["contracts", "dbrx"]) == 0
    out = capsys.readouterr().out
    assert "renormalize = 'lp'" in out and "renorm_p = 1.0" in out and "renorm_guard:" in out and "L_1 norm" in out
    assert main(["contracts", "dbrxx"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "contract='dbrxx' is not a known contract" in err


def test_the_listing_says_transformers_deepseek_v3_router_follows_deepseek_v3(capsys):
    # issue 55: transformers 5.24's DeepseekV3TopkRouter masks dropped groups with -inf (deepseek-v3); the 0.0 mask
    # (deepseek-v3-reference) is DeepSeek's own model code, and the listing said transformers' before
    assert main(["contracts"]) == 0
    by_name = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "mask -inf" in by_name["deepseek-v3"] and "DeepseekV3TopkRouter" in by_name["deepseek-v3"]
    assert "mask 0 " in by_name["deepseek-v3-reference"] and "modeling_deepseek_v3" not in by_name["deepseek-v3-reference"]
