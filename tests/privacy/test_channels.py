"""Every tensor a method's clients send is privatised under the run's privacy settings, or the run refuses to start
with one line naming the method and the channel: walked over every registered method and mode."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core.registry import METHODS, get_method
from raysim.privacy.channels import PRIVATISED, REFUSED, extras_of, outcomes

SETTINGS = {
    "user": {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-3},
    "record": {"mode": "record", "noise_multiplier": 1.0, "delta": 1e-3},
    "secure": {"secure_aggregation": True},
}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("method", list(METHODS))
def test_every_channel_is_privatised_or_the_run_refuses_in_one_line(method, setting):
    privacy = SETTINGS[setting]
    found = outcomes(method, privacy.get("mode", "none"), privacy.get("secure_aggregation", False))
    info = get_method(method)
    sent = {"activations"} if info.split_learning else {"params", *extras_of(info.cls)}
    assert set(found) == sent
    assert {state for state, _ in found.values()} <= {PRIVATISED, REFUSED}
    refused = [line for state, line in found.values() if state == REFUSED]
    layers = [{"federation": {"clients": 100}, "privacy": privacy}]
    if refused:
        with pytest.raises(ConfigError) as error:
            build_config(method, layers)
        assert str(error.value) == refused[0] and method in refused[0] and "\n" not in refused[0]
    else:
        assert build_config(method, layers).privacy.mode == privacy.get("mode", "none")


def test_the_papers_methods_and_the_baselines_compared_under_dp_are_covered():
    for method in ("fedavg", "fedvpt", "sgpt", "fgpt"):
        assert all(state == PRIVATISED for state, _ in outcomes(method, "user").values()), method
    assert outcomes("sgpt", "user")["selection_counts"][0] == PRIVATISED
    assert outcomes("sgpt", "record")["params"][0] == REFUSED  # its counts read the data outside DP-SGD
    assert outcomes("fedvpt", "record")["params"][0] == PRIVATISED
    assert outcomes("fedmix", "user")["data_mean"][0] == REFUSED
    assert outcomes("fedgcr", "none", secure_aggregation=True)["params"][0] == REFUSED
    # refused for the secure sum, which the line names, not for record-level DP, which pfedhn runs alone
    assert outcomes("pfedhn", "record")["params"][0] == PRIVATISED
    assert outcomes("pfedhn", "record", secure_aggregation=True)["params"][1].startswith(
        "privacy.secure_aggregation=true: pfedhn cannot run where the server sees only the cohort's sum"
    )


@pytest.mark.parametrize("method", [m for m in METHODS if not get_method(m).split_learning])
def test_a_record_level_refusal_suggests_user_level_dp_only_where_it_runs(method):
    """The record-level line ends "use privacy.mode=user" exactly where user-level DP covers the method."""
    refused = [line for state, line in outcomes(method, "record").values() if state == REFUSED]
    user_runs = all(state == PRIVATISED for state, _ in outcomes(method, "user").values())
    if refused:
        assert refused[0].endswith("; use privacy.mode=user" if user_runs else "; use another method"), refused[0]


WITH_MEAN = """
from typing import ClassVar

from raysim import FedAvg, build_config, register
from raysim.core.protocol import SendsExtras

@register("fedavg-with-mean", "FedAvg that also sends its rows' mean", family="global")
class WithMean(SendsExtras, FedAvg):
    extras_sent: ClassVar[dict[str, str]] = {"data_mean": "the mean of the client's images"}

try:
    build_config("fedavg-with-mean", [{"privacy": {"mode": "record", "noise_multiplier": 1.0, "delta": 1e-3}}])
except Exception as error:
    print(error)
"""


def test_an_extra_sent_beside_dp_sgds_parameters_is_refused_at_record_level():
    """DP-SGD privatises the trained parameters only: a data-dependent extra sent beside them is refused, whatever
    the method declares (a plug-in FedAvg that also sends its rows' mean, registered in a fresh interpreter so the
    tests' registry keeps only raysim's methods)."""
    line = subprocess.run([sys.executable, "-c", WITH_MEAN], capture_output=True, text=True, check=True).stdout
    assert line.strip() == (
        "privacy.mode=record: fedavg-with-mean sends data_mean (the mean of the client's images), which DP-SGD does "
        "not privatise; use another method"
    )
