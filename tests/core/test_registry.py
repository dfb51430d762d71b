"""Declaring a method (a declaration's ``declare`` with ``@implements`` on its class) and registering one defined
outside raysim (``@register``), each in a fresh interpreter so the tests' registry keeps only raysim's methods."""

from __future__ import annotations

import subprocess
import sys

OUTSIDE = """
from dataclasses import dataclass

from raysim import FedAvg, build_config, get_method, register

@dataclass(frozen=True)
class Options:
    temperature: float = 2.0

@register("soft-ce", "an example", family="global", options=Options)
class SoftCE(FedAvg):
    pass

config = build_config("soft-ce", [{"soft-ce": {"temperature": 4.0}}])
print(get_method("soft-ce").cls is SoftCE, SoftCE.info is get_method("soft-ce"), config.options.temperature)
"""

MISMATCHED = """
from raysim import FedAvg
from raysim.core.protocol import SplitLearning
from raysim.core.protocol import implements
from raysim.core.registry import declare

declare("{name}", "{path}", "an example", family="{family}", cohort={cohort})
try:
    @implements("{name}")
    class Example({bases}):
        pass
except TypeError as error:
    print(error)
"""


def python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_a_method_defined_outside_raysim_registers_with_one_decorator():
    assert python(OUTSIDE).split() == ["True", "True", "4.0"]


def test_implements_refuses_a_class_its_declaration_does_not_describe():
    here = "__main__:Example"
    cases = {
        (
            "a",
            "elsewhere:Other",
            "global",
            False,
            "FedAvg",
        ): "method 'a' is declared as elsewhere:Other, not __main__:Example",
        ("b", here, "global", True, "object"): "method 'b' is declared with cohort=True but is not a CohortTraining",
        (
            "c",
            here,
            "global",
            False,
            "SplitLearning, FedAvg",
        ): "method 'c': family 'global' must be 'split' exactly when",
        ("d", here, "split", False, "FedAvg"): "method 'd': family 'split' must be 'split' exactly when",
    }
    for (name, path, family, cohort, bases), message in cases.items():
        code = MISMATCHED.format(name=name, path=path, family=family, cohort=cohort, bases=bases)
        assert python(code).startswith(message), (name, python(code))
