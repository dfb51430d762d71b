"""Private runs end to end on the sequential backend: the epsilon logged every round is dp-accounting's for the
event raysim runs (built here by hand), a target is met within 2%, resume is exact under adaptive clipping,
record-level DP-SGD runs and is accounted, secure aggregation changes bytes but not numbers, and bad input is one
line with exit code 2."""

from __future__ import annotations

import io

import dp_accounting
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from rich.console import Console

from raysim.cli import main
from raysim.config import build_config
from raysim.engine.driver import run
from raysim.ops.metrics import TIMING_KEYS
from raysim.privacy import calibration, secure_sum
from raysim.testing.console import own_lines
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import provenance, resume

SMALL = {
    "federation": {"clients": 40, "rounds": 3, "participation": 0.25, "eval_every": 3, "seed": 1},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
    "fedvpt": {"prompt_length": 2},
}


def quiet_run(config, **kwargs):
    return run(config, show_progress=False, console=Console(file=io.StringIO()), **kwargs)


def config_for(tracking_uri, tmp_path, privacy, **sections):
    layers = [SMALL, {"privacy": privacy, **sections}]
    layers.append({"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck"), "keep": 0}})
    return build_config("fedvpt", layers)


def rdp_epsilon(event, delta, relation):
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    return accountant.compose(event).get_epsilon(delta)


def test_user_level_epsilon_is_dp_accountings_for_a_fixed_cohort_and_meets_the_target(tracking_uri, tmp_path):
    config = config_for(tracking_uri, tmp_path, {"mode": "user", "target_epsilon": 8.0, "delta": 1e-3})
    result = quiet_run(config)
    z = calibration.noise_multiplier(config)
    # 10 of 40 clients without replacement each round: replacing one client moves the clipped sum by up to 2C
    for round, logged in enumerate((h["privacy_epsilon"] for h in result.history), start=1):
        step = dp_accounting.SampledWithoutReplacementDpEvent(40, 10, dp_accounting.GaussianDpEvent(z / 2))
        expected = rdp_epsilon(
            dp_accounting.SelfComposedDpEvent(step, round), 1e-3, dp_accounting.NeighboringRelation.REPLACE_ONE
        )
        assert logged == pytest.approx(expected, rel=1e-6)
    assert 0.98 * 8.0 <= result.history[-1]["privacy_epsilon"] <= 8.0
    assert MlflowClient(tracking_uri).get_run(result.run_id).data.metrics["summary/privacy_epsilon"] == pytest.approx(
        result.history[-1]["privacy_epsilon"]
    )


def test_a_resumed_private_run_with_adaptive_clipping_equals_the_uninterrupted_one(tracking_uri, tmp_path):
    privacy = {"mode": "user", "noise_multiplier": 0.5, "delta": 1e-3, "clip": "adaptive:0.5", "count_noise": 2.0}
    full = quiet_run(config_for(tracking_uri, tmp_path, privacy, federation={"sampling": "poisson"}))
    clips = [h["privacy_clip"] for h in full.history]
    assert clips[0] == 1.0 and len(set(clips)) == 3  # C moved every round
    found = ckpt.load(tmp_path / "ck" / full.run_id / "round-000002")
    resumed = quiet_run(resume.resumed_config(found, "fedvpt", []), resume=found)

    def numbers(history):
        return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]

    assert numbers(resumed.history) == numbers(full.history)
    # the count's release and the update's are one Gaussian mechanism of z = 0.5 (Andrew et al.): Poisson, add/remove
    step = dp_accounting.PoissonSampledDpEvent(10 / 40, dp_accounting.GaussianDpEvent(0.5))
    expected = rdp_epsilon(
        dp_accounting.SelfComposedDpEvent(step, 3), 1e-3, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    assert full.history[-1]["privacy_epsilon"] == pytest.approx(expected, rel=1e-6)


def test_privacy_settings_name_their_runs_apart_and_leave_other_runs_names_alone():
    plain = build_config("fedvpt", [SMALL])
    private = build_config("fedvpt", [SMALL, {"privacy": {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-3}}])
    secure = build_config("fedvpt", [SMALL, {"privacy": {"secure_aggregation": True}}])
    explicit = build_config("fedvpt", [SMALL, {"privacy": {"mode": "none"}, "federation": {"sampling": "fixed"}}])
    hashes = [provenance.config_hash(c) for c in (plain, private, secure, explicit)]
    assert len(set(hashes[:3])) == 3 and hashes[3] == hashes[0]


def test_record_level_epsilon_is_the_worst_clients_of_all(tracking_uri, tmp_path):
    """Each client's epsilon by hand (B of its n rows without replacement, Gaussian(z/2), E ceil(n / B) steps a
    round): the run reports the largest, which is not the smallest client's where steps jump with n."""
    config = config_for(tracking_uri, tmp_path, {"mode": "record", "noise_multiplier": 1.0, "delta": 1e-3})
    result = quiet_run(config)
    from raysim.engine.setup import prepare_shards

    shards = prepare_shards(config)
    sizes = sorted({int(n) for n in shards.train_sizes()[shards.seen_clients()]})
    by_size = {}
    for n in sizes:
        step = dp_accounting.SampledWithoutReplacementDpEvent(n, min(16, n), dp_accounting.GaussianDpEvent(0.5))
        event = dp_accounting.SelfComposedDpEvent(step, -(-n // 16) * 3)
        by_size[n] = rdp_epsilon(event, 1e-3, dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert result.history[-1]["privacy_epsilon"] == pytest.approx(max(by_size.values()), rel=1e-6)
    assert "global_acc" in result.history[-1]


def test_a_client_just_past_a_multiple_of_the_batch_spends_more_than_a_smaller_one():
    """z = 2, B = 32, T = 50: 20 rows (1 step of all 20), 33 rows (2 steps of 32 of 33), 64 rows (2 steps of 32)."""
    layers = [{"train": {"batch_size": 32}, "federation": {"rounds": 50, "clients": 100}}]
    config = build_config("fedvpt", [*layers, {"privacy": {"mode": "record", "noise_multiplier": 2.0, "delta": 1e-5}}])

    class Sizes:
        def seen_clients(self):
            return [0, 1, 2]

        def train_sizes(self):
            return np.array([20, 64, 33])

    units = calibration.record_units(config, Sizes())
    assert units == (20, 33)  # per number of steps, the fewest rows
    spent = {n: calibration.spent(config, 50, (n,)) for n in (20, 33, 64)}
    assert spent[33] > spent[64] and spent[33] > spent[20]
    assert calibration.spent(config, 50, units) == pytest.approx(spent[33])


def test_secure_aggregation_changes_the_bytes_and_not_the_numbers(tracking_uri, tmp_path):
    plain = quiet_run(config_for(tracking_uri, tmp_path, {}))
    secure = quiet_run(config_for(tracking_uri, tmp_path, {"secure_aggregation": True}))
    down, up = secure_sum.overhead(10)
    for a, b in zip(plain.history, secure.history, strict=True):
        assert b["bytes_up"] == a["bytes_up"] + 10 * up and b["bytes_down"] == a["bytes_down"] + 10 * down
        same = {k for k in a if k not in TIMING_KEYS and not k.startswith("bytes")}
        assert {k: b[k] for k in same} == {k: a[k] for k in same}


def test_an_extra_not_sent_under_user_level_dp_is_not_charged_to_the_uplink(tracking_uri, tmp_path):
    """FGPT's group counts have a private share of 0: under user-level DP its clients do not send them, so each
    reached client's upload is the counts' bytes lighter (float64, one a group) and the step gets zeros."""
    small = {k: v for k, v in SMALL.items() if k != "fedvpt"} | {"fgpt": {"groups": 3}}
    tracking = {"tracking": {"tracking_uri": tracking_uri}, "checkpoint": {"dir": str(tmp_path / "ck"), "keep": 0}}
    user = {"privacy": {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-5}}
    plain, private = (quiet_run(build_config("fgpt", [small, extra, tracking])) for extra in ({}, user))
    for a, b in zip(plain.history, private.history, strict=True):
        assert a["bytes_up"] - b["bytes_up"] == 10 * 3 * 8


def test_compressed_links_under_user_level_dp_spend_the_budget_of_uncompressed_ones(tracking_uri, tmp_path):
    """The server clips each update as it decodes it, and the downlink encodes the model the noised mean made
    (post-processing): the epsilon is the uncompressed run's every round; the bytes on both links are fewer."""
    privacy, cohort = {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-3}, {"clients": 12, "participation": 0.5}
    plain = quiet_run(config_for(tracking_uri, tmp_path, privacy, federation=cohort))
    links = {"uplink": "qsgd:4", "error_feedback": True, "downlink": "qsgd:8"}
    compressed = quiet_run(config_for(tracking_uri, tmp_path, privacy, federation=cohort, compression=links))
    assert [h["privacy_epsilon"] for h in compressed.history] == [h["privacy_epsilon"] for h in plain.history]
    for a, b in zip(plain.history, compressed.history, strict=True):
        assert b["bytes_up"] < a["bytes_up"] / 4 and b["bytes_down"] <= a["bytes_down"]
    # 18 downloads by 12 clients: at least 6 are of the encoded updates since a client's last round, not the model
    assert sum(h["bytes_down"] for h in compressed.history) < sum(h["bytes_down"] for h in plain.history)


USER = "privacy.mode=user privacy.noise_multiplier=1 privacy.delta=1e-5"
BAD = {
    "negative z": (
        "privacy.mode=user privacy.noise_multiplier=-1 privacy.delta=1e-5",
        "noise_multiplier=-1.0 must be > 0",
    ),
    "no noise": ("privacy.mode=user privacy.noise_multiplier=0 privacy.delta=1e-5", "z = 0 adds no noise"),
    "unused key": ("privacy.min_survivors=3", "does nothing without privacy.secure_aggregation=true"),
    "over-selection": (f"{USER} federation.over_select=0.5", "over-selection keeps the first to finish"),
    "delta of a client": (
        "privacy.mode=user privacy.noise_multiplier=1 privacy.delta=0.1",
        "delta=0.1 is at least 1 / 20",
    ),
    "target, no delta": ("privacy.mode=user privacy.target_epsilon=4", "needs privacy.delta"),
    "quantile": (f"{USER} privacy.clip=adaptive:2", "needs a quantile in (0, 1)"),
    "count noise": (f"{USER} privacy.clip=adaptive:0.5", "privacy.count_noise=0.25 must exceed z / 2 = 0.5"),
    "pld, fixed": (f"{USER} privacy.accountant=pld", "privacy.accountant=pld cannot account sampling without"),
    "clients' noise, no secure sum": (f"{USER} privacy.noise_by=clients", "privacy.noise_by=clients is user-level"),
    "secure sum of sparse updates": (
        "privacy.secure_aggregation=true compression.uplink=topk:0.1",
        "cannot add compression.uplink=topk:0.1's encodings",
    ),
    "lost rounds under poisson": (
        f"{USER} privacy.secure_aggregation=true federation.sampling=poisson",
        "which user-level accounting does not count; use federation.sampling=fixed",
    ),
    "a noise the PLD accountant cannot discretise": (
        f"{USER.replace('=1 ', '=1e-160 ')} federation.sampling=poisson privacy.accountant=pld",
        "the PLD accountant cannot discretise",
    ),
    "lost rounds at a deadline": (
        f"{USER} privacy.secure_aggregation=true federation.deadline_s=5 systems.speed=lognormal:3,0.5",
        "federation.stragglers=drop a client's arrival depends on its rows",
    ),
    "lost rounds at a deadline, cut stragglers": (
        f"{USER} privacy.secure_aggregation=true federation.deadline_s=5 systems.speed=lognormal:3,0.5 "
        "federation.stragglers=partial",
        "federation.stragglers=partial a client's arrival depends on its rows",
    ),
}


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a user would see it above the line
@pytest.mark.parametrize("settings, fragment", BAD.values(), ids=BAD)
def test_bad_privacy_input_is_one_line_exit_2_and_leaves_no_run(tmp_path, settings, fragment):
    args = [part for setting in settings.split() for part in ("--set", setting)]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = CliRunner().invoke(main, ["run", "fedvpt", "--preset", "quick", "--tracking-uri", uri, *args])
    assert result.exit_code == 2, result.output
    lines = own_lines(result.stderr)
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(
    "method, setting, fragment",
    [
        ("fedgcr", "privacy.mode=user", "fedgcr cannot run where the server sees only the cohort's sum"),
        ("pfedhn", "privacy.secure_aggregation=true", "pfedhn cannot run where the server sees only the cohort's sum"),
        ("fedmix", "privacy.mode=user", "fedmix sends data_mean"),
        ("fedvz", "privacy.mode=user", "fedvz is split learning"),
        ("harmofl", "privacy.mode=user", "harmofl is not covered by user-level DP"),
        ("fedem", "privacy.mode=record", "fedem is not covered by record-level DP-SGD"),
        ("sgpt", "privacy.mode=record", "sgpt is not covered by record-level DP-SGD"),
    ],
)
def test_a_method_whose_channel_cannot_be_privatised_is_refused_in_one_line(tmp_path, method, setting, fragment):
    extra = [] if "secure" in setting else ["--set", "privacy.noise_multiplier=1", "--set", "privacy.delta=1e-5"]
    result = CliRunner().invoke(
        main,
        [
            "run",
            method,
            "--preset",
            "quick",
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'm.db'}",
            "--set",
            setting,
            *extra,
        ],
    )
    assert result.exit_code == 2 and len(own_lines(result.stderr)) == 1 and fragment in result.stderr, result.stderr


def test_private_runs_give_the_same_numbers_on_two_ray_workers_as_in_one_process(ray_session, tracking_uri, tmp_path):
    on_ray = {"backend": "ray", "workers": 2, "cpus_per_client": 0.5}
    for privacy in (
        {"mode": "record", "noise_multiplier": 1.0, "delta": 1e-3},
        {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-3, "clip": "adaptive:0.5", "count_noise": 2.0},
    ):
        here = quiet_run(config_for(tracking_uri, tmp_path, privacy))
        there = quiet_run(config_for(tracking_uri, tmp_path, privacy, resources=on_ray))
        for a, b in zip(here.history, there.history, strict=True):
            same = [k for k in a if k not in TIMING_KEYS]
            assert {k: b[k] for k in same} == pytest.approx({k: a[k] for k in same}, abs=1e-6)
