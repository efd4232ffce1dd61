"""The call settings a pinned case runs a candidate under are torch's own, set and put back as torch sets them."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path


def test_deterministic_algorithms_are_torchs_two_settings_and_are_restored():
    # In a fresh interpreter: inductor is not loaded there, which is the path that must not import it, and an import
    # of inductor during the call must read its setting as torch.use_deterministic_algorithms(True) leaves it.
    program = textwrap.dedent("""
        import os, sys, torch
        from contracts.candidates.fenced_call import _deterministic_algorithms
        seen = {}
        with _deterministic_algorithms():
            seen["flag"] = torch.are_deterministic_algorithms_enabled()
            seen["warn_only"] = torch.is_deterministic_algorithms_warn_only_enabled()
            seen["inductor_loaded_by_us"] = "torch._inductor.config" in sys.modules
            import torch._inductor.config as inductor  # a candidate that compiles: imported during its call
            seen["inductor_in_call"] = inductor.deterministic
        seen["after"] = (torch.are_deterministic_algorithms_enabled(), inductor.deterministic,
                         os.environ.get("TORCHINDUCTOR_DETERMINISTIC"))
        with _deterministic_algorithms():  # inductor loaded now: its setting set and put back directly
            seen["inductor_loaded"] = inductor.deterministic
        seen["after_loaded"] = (torch.are_deterministic_algorithms_enabled(), inductor.deterministic)
        torch.use_deterministic_algorithms(True)  # a process that runs deterministic already keeps it
        with _deterministic_algorithms():
            pass
        seen["kept"] = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                        inductor.deterministic)
        print(seen)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert seen == {"flag": True, "warn_only": True, "inductor_loaded_by_us": False, "inductor_in_call": True,
                    "after": (False, False, None), "inductor_loaded": True, "after_loaded": (False, False),
                    "kept": (True, False, True)}, seen
