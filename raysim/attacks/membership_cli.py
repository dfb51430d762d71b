"""``raysim attack membership``: membership inference against a recorded run's final global model or its clients'
personalised ones, by loss threshold and, with ``--shadows``, by offline LiRA. Imports the attack when it runs."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from raysim.attacks.cli_options import RUN, TRACKING_URI, check_client_range, client_ids
from raysim.base.errors import ConfigError
from raysim.config import TrackingConfig

DEFAULT_MEMBERS = {"global": "heard", "personal": "with a model", "lira": "half heard"}  # ``clients`` by default


@click.command(context_settings={"max_content_width": 100})
@RUN
@click.option(
    "--clients",
    metavar="IDS",
    help="Comma-separated clients whose rows are scored (default: those whose updates the server used; with --model "
    "personal, those holding a model; with --shadows, half of those the server heard, drawn from the run seed).",
)
@click.option(
    "--model",
    "target",
    type=click.Choice(["global", "personal"]),
    default="global",
    show_default=True,
    help="The final global model, or each client's own (a personalised method's, from the run's last checkpoint).",
)
@click.option(
    "--shadows",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Shadow runs for offline LiRA beside the loss threshold (each replays the run without the scored clients); "
    "0: the loss threshold alone.",
)
@TRACKING_URI
def membership(run_id, clients, target, shadows, tracking_uri):
    """Membership inference against the run's final global model or its clients' personalised ones: members are the
    clients' training rows, non-members their test rows. The loss threshold (Yeom et al., CSF 2018) and, with
    --shadows, offline LiRA (Carlini et al., S&P 2022) on the same rows; ROC AUC and TPR at 1% FPR."""
    from raysim.attacks.attack_run import attack_run
    from raysim.attacks.figures import roc_figure
    from raysim.attacks.membership_attack import lira, membership, refuse_split_learning
    from raysim.attacks.recorded import client_states, contributors, final_state, personal_models, recorded_config
    from raysim.attacks.shadows import attacked_half
    from raysim.core.protocol import Personalised
    from raysim.core.registry import get_method
    from raysim.engine.setup import initial_state, prepare_shards, resolved

    chosen = client_ids(clients)
    uri = TrackingConfig(tracking_uri=tracking_uri).resolved_uri
    config = recorded_config(uri, run_id)
    refuse_split_learning(config)  # before the run's state and data are read
    states = None
    if target == "personal":
        if shadows:
            raise ConfigError(
                "--shadows trains shadow runs without the scored clients, which then hold no personal model to "
                "compare; pass --model global for LiRA, or drop --shadows"
            )
        if not issubclass(get_method(config.method).cls, Personalised):
            raise ConfigError(
                f"{config.method} keeps no personalised models; pass --model global, or attack a personalised "
                "method's run (ditto, fedrod, pfedhn, ...: raysim ls methods)"
            )
        states = client_states(uri, run_id, config)
    state = final_state(uri, run_id)
    if states is not None:
        states = personal_models(config, state, states)
    check_client_range(chosen, config.federation.clients)
    if chosen is not None:
        targets = chosen
        refuse_non_members(chosen, states, uri, run_id)
    elif states is not None:
        targets = sorted(states)
    else:
        heard = contributors(uri, run_id)
        targets = attacked_half(config.federation.seed, heard) if shadows else heard
    default = DEFAULT_MEMBERS["lira" if shadows else target]
    if not targets:
        raise ConfigError(f"the run has no clients to score by default ({default}: none); pass --clients 0,1,...")
    config, _, _, shards = initial_state(resolved(config), prepare_shards(config))
    found = {"loss threshold": membership(config, state.params, shards, targets, states)}
    if shadows:
        found["offline LiRA"] = lira(config, state.params, shards, targets, shadows, _shadow_progress(shadows))
    params = {"clients": clients or default, "model": target, "shadows": shadows}
    with attack_run(uri, run_id, "membership", params) as tracker:
        loss, result = found["loss threshold"], found.get("offline LiRA")
        metrics = {"auc": loss.roc.auc, "tpr_at_1pct_fpr": loss.roc.tpr_at_low_fpr}
        if result is not None:
            metrics |= {"lira_auc": result.roc.auc, "lira_tpr_at_1pct_fpr": result.roc.tpr_at_low_fpr}
        tracker.log_metrics(metrics | {"members": loss.members, "non_members": loss.non_members}, step=0)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "roc.png"
            curves = {f"{name}: AUC {m.roc.auc:.3f}": (m.roc.fpr, m.roc.tpr) for name, m in found.items()}
            roc_figure(curves, f"membership inference, {target} model", path)
            tracker.log_artifact(path)
        click.echo(
            f"membership ({target} model): "
            + "; ".join(
                f"{name} AUC {m.roc.auc:.3f}, TPR {m.roc.tpr_at_low_fpr:.3f} at 1% FPR" for name, m in found.items()
            )
            + f" ({loss.members} members, {loss.non_members} non-members"
            + (", too few for 1% FPR: that rate is at no false positive" if loss.non_members < 100 else "")
            + f"); attack run {tracker.run_id}, nested under {run_id}"
        )


def refuse_non_members(chosen: list[int], states: dict | None, uri: str, run_id: str) -> None:
    """One line for a chosen client whose rows the attacked model never trained on, so that its "members" would be
    none: under ``--model personal`` one that holds no model in the run's last checkpoint, else one whose updates the
    server never used (when the run recorded which it used)."""
    from raysim.attacks.recorded import contributors

    if states is not None:
        missing = [c for c in chosen if c not in states]
        if missing:
            raise ConfigError(
                f"--clients names client {missing[0]}, which holds no personal model in the run's last checkpoint "
                f"(it never trained); clients with one: {','.join(map(str, sorted(states)))}"
            )
        return
    try:
        heard = set(contributors(uri, run_id))
    except ConfigError:  # a run resumed from a checkpoint that predates the record: nothing to check against
        return
    unheard = [c for c in chosen if c not in heard]
    if unheard:
        raise ConfigError(
            f"--clients names client {unheard[0]}, whose updates the run's server never used, so its rows are no "
            f"members of the global model; leave --clients out to score the {len(heard)} clients it heard"
        )


def _shadow_progress(shadows: int):
    """A line on stderr as each shadow run ends (each is a whole run: minutes on a laptop)."""
    started = time.perf_counter()

    def report(k: int, heard: int) -> None:
        click.echo(
            f"shadow run {k + 1}/{shadows}: {heard} clients heard, {time.perf_counter() - started:.0f} s so far",
            err=True,
        )

    return report
