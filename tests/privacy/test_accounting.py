"""raysim.privacy.accounting against dp-accounting's own accountants on hand-built events, hand-computed bounds, and
its calibration and input checks."""

import math

import dp_accounting as dpa
import pytest

from raysim.base.errors import ConfigError
from raysim.privacy import accounting

DELTA = 1e-5
ADD_OR_REMOVE = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE = dpa.NeighboringRelation.REPLACE_ONE


def expected_epsilon(event, relation, accountant):
    """dp-accounting's epsilon for ``event``, from a fresh accountant with its default settings."""
    fresh = (
        dpa.rdp.RdpAccountant(neighboring_relation=relation) if accountant == "rdp" else dpa.pld.PLDAccountant(relation)
    )
    return fresh.compose(event).get_epsilon(DELTA)


@pytest.mark.parametrize(
    ("build", "args", "expected", "relation", "accountant"),
    [
        (  # user level, 100 of 1000 clients uniformly without replacement, 100 rounds: replace-one, sigma = z / 2
            accounting.user_event,
            (1.1, 100, 1000, 100, "fixed"),
            dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(1000, 100, dpa.GaussianDpEvent(0.55)), 100),
            REPLACE,
            "rdp",
        ),
        (  # user level, Poisson with q = 0.1: add/remove, sigma = z
            accounting.user_event,
            (1.1, 100, 1000, 100, "poisson"),
            dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1.1)), 100),
            ADD_OR_REMOVE,
            "rdp",
        ),
        (
            accounting.user_event,
            (1.1, 100, 1000, 100, "poisson"),
            dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1.1)), 100),
            ADD_OR_REMOVE,
            "pld",
        ),
        (  # record level, batches of 32 of 500 records, 5 steps x 100 rounds
            accounting.record_event,
            (1.0, 32, 500, 500, "fixed"),
            dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(500, 32, dpa.GaussianDpEvent(0.5)), 500),
            REPLACE,
            "rdp",
        ),
        (
            accounting.record_event,
            (1.0, 32, 500, 500, "poisson"),
            dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(32 / 500, dpa.GaussianDpEvent(1.0)), 500),
            ADD_OR_REMOVE,
            "rdp",
        ),
    ],
)
def test_epsilon_is_dp_accountings_on_the_hand_built_event(build, args, expected, relation, accountant):
    event = build(*args)
    assert event == expected
    assert accounting.relation(event) is relation
    assert accounting.epsilon(event, DELTA, accountant) == pytest.approx(
        expected_epsilon(expected, relation, accountant), rel=1e-6
    )


def test_epsilon_after_each_round_grows_from_zero():
    spent = [accounting.epsilon(accounting.user_event(1.0, 100, 1000, r), DELTA) for r in (0, 1, 10, 100, 1000)]
    assert spent[0] == 0
    assert spent == sorted(spent) and len(set(spent)) == len(spent)


@pytest.mark.parametrize("target", [1.0, 4.0, 8.0])
def test_calibrate_user_level_spends_the_target(target):
    event_of = lambda z: accounting.user_event(z, 100, 1000, 100)
    z = accounting.calibrate(event_of, target, DELTA)
    assert 0.995 * target <= accounting.epsilon(event_of(z), DELTA) <= target
    assert accounting.epsilon(event_of(z * (1 - 2 * accounting.CALIBRATION_RTOL)), DELTA) > target


def test_calibrate_record_level_spends_the_target():
    event_of = lambda z: accounting.record_event(z, 16, 200, 13 * 50, "poisson")  # 13 steps a round, 50 rounds
    z = accounting.calibrate(event_of, 4.0, DELTA)
    assert 0.995 * 4.0 <= accounting.epsilon(event_of(z), DELTA) <= 4.0


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
@pytest.mark.parametrize("build", [accounting.user_event, accounting.record_event])
def test_no_noise_spends_infinite_epsilon(build, sampling):
    assert accounting.epsilon(build(0.0, 10, 100, 5, sampling), DELTA) == math.inf
    if sampling == "poisson":
        assert accounting.epsilon(build(0.0, 10, 100, 5, sampling), DELTA, "pld") == math.inf


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # dp-accounting's own overflow on the way to its NaN
@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_a_noise_too_small_to_compute_spends_infinite_epsilon_not_zero(sampling):
    """dp-accounting's RDP of z = 1e-160 is NaN at every order, which its conversion would read as epsilon 0; at
    z = 1e-300 its series divides by zero."""
    assert accounting.epsilon(accounting.user_event(1e-160, 10, 100, 5, sampling), DELTA) == math.inf
    assert accounting.epsilon(accounting.user_event(1e-300, 10, 100, 5, sampling), DELTA) == math.inf
    if sampling == "poisson":
        with pytest.raises(ConfigError, match="the PLD accountant cannot discretise .* pass privacy.accountant=rdp"):
            accounting.epsilon(accounting.user_event(1e-160, 10, 100, 5, sampling), DELTA, "pld")


def classical_rdp_bound(sigma, rounds):
    """Mironov 2017: the Gaussian of noise sigma / sensitivity is (alpha, alpha / (2 sigma^2))-RDP, composed ``rounds``
    times and converted with epsilon = rdp + log(1 / delta) / (alpha - 1) (Proposition 3)."""
    return min(rounds * a / (2 * sigma**2) + math.log(1 / DELTA) / (a - 1) for a in accounting.RDP_ORDERS)


@pytest.mark.parametrize("rounds", [1, 20])
@pytest.mark.parametrize("z", [1.0, 4.0])
def test_whole_cohort_is_the_gaussian_mechanism(z, rounds):
    # add/remove: sensitivity C, so the T-fold Gaussian is one of noise z / sqrt(T) (Balle & Wang 2018's exact epsilon)
    poisson = accounting.user_event(z, 50, 50, rounds, "poisson")
    exact = dpa.get_epsilon_gaussian(z / math.sqrt(rounds), DELTA)
    assert accounting.epsilon(poisson, DELTA, "pld") == pytest.approx(exact, rel=2e-3)
    assert exact < accounting.epsilon(poisson, DELTA) <= classical_rdp_bound(z, rounds)
    # replace-one: sensitivity 2C, so the same noise is a Gaussian of noise z / 2
    fixed = accounting.user_event(z, 50, 50, rounds)
    exact = dpa.get_epsilon_gaussian(z / 2 / math.sqrt(rounds), DELTA)
    assert exact < accounting.epsilon(fixed, DELTA) <= classical_rdp_bound(z / 2, rounds)


def test_split_noise():
    assert accounting.split_noise(1.0, 1.0) == pytest.approx(2 / math.sqrt(3), rel=1e-12)  # 1 - 1/4 = 3/4
    assert accounting.split_noise(1.0, 5.0) == pytest.approx(
        1 / math.sqrt(0.99), rel=1e-12
    )  # sigma_b = m / 20, m = 100
    z_update = accounting.split_noise(0.7, 3.0)
    assert (z_update**-2 + 6.0**-2) ** -0.5 == pytest.approx(0.7, rel=1e-12)
    assert accounting.split_noise(0.0, 1.0) == 0.0
    for count_std in (0.5, 0.4, 0.0, -1.0):  # 2 sigma_b <= z: the count would need more than all of z
        with pytest.raises(ValueError, match=rf"count_std={count_std}"):
            accounting.split_noise(1.0, count_std)
    with pytest.raises(ValueError, match=r"z=-1.0"):
        accounting.split_noise(-1.0, 1.0)


FIXED = accounting.user_event(1.0, 10, 100, 5)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: accounting.epsilon(FIXED, 1.0), r"delta=1.0 "),
        (lambda: accounting.epsilon(FIXED, 0.0), r"delta=0.0 "),
        (lambda: accounting.epsilon(FIXED, -1e-5), r"delta=-1e-05 "),
        (lambda: accounting.epsilon(FIXED, DELTA, "moments"), r"accountant='moments' "),
        (
            lambda: accounting.epsilon(FIXED, DELTA, "pld"),
            r"accountant='pld' .* use accountant='rdp' or sampling='poisson'",
        ),
        (lambda: accounting.user_event(-1.0, 10, 100, 5), r"z=-1.0 "),
        (lambda: accounting.user_event(math.nan, 10, 100, 5), r"z=nan "),
        (lambda: accounting.user_event(1.0, 200, 100, 5), r"cohort=200 .*population=100"),
        (lambda: accounting.user_event(1.0, 0, 100, 5), r"cohort=0 "),
        (lambda: accounting.user_event(1.0, 10, 100, -1), r"rounds=-1 "),
        (lambda: accounting.user_event(1.0, 10, 100, 5, "shuffle"), r"sampling='shuffle' "),
        (lambda: accounting.record_event(1.0, 64, 32, 5), r"batch=64 .*records=32"),
        (lambda: accounting.calibrate(lambda z: FIXED, 0.0, DELTA), r"target_epsilon=0.0 "),
        (lambda: accounting.calibrate(lambda z: accounting.user_event(z, 10, 100, 5), 1.0, 2.0), r"delta=2.0 "),
    ],
)
def test_bad_input_is_one_line_naming_the_value(call, match):
    with pytest.raises(ValueError, match=match) as error:
        call()
    assert "\n" not in str(error.value)
