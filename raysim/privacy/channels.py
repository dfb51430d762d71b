"""What a method's clients send, channel by channel, and whether the run's privacy settings cover each: every
tensor that leaves a client is privatised and accounted, or the run refuses to start with one line that names the
method, the channel and what to do (docs/how-to/privacy.md).

Channels: the trained parameters (``params``, always data-dependent: user-level DP clips and noises them as one
vector), each named extra (:attr:`~raysim.core.protocol.SendsExtras.extras_sent`; clipped with its own share of the
clip where the method declares one in :attr:`~raysim.core.protocol.SendsExtras.private_extras`), and for split
learning the cut layer's activations every local step. Scalar metrics (loss, steps, timings) are the simulator's
instrumentation, logged outside the privacy boundary; a method whose server step reads them declares
:attr:`~raysim.core.protocol.Method.each_update`.
"""

from __future__ import annotations

from raysim.base.errors import ConfigError
from raysim.core.registry import get_method

PRIVATISED, REFUSED = "privatised", "refused"


def extras_of(cls) -> dict[str, str]:
    """The extras a method's clients may send, by name, with what each is."""
    from raysim.core.protocol import SendsExtras  # torch: imported only where a run asks for privacy

    return dict(cls.extras_sent) if issubclass(cls, SendsExtras) else {}


def outcomes(method: str, mode: str, secure_aggregation: bool = False) -> dict[str, tuple[str, str]]:
    """Per channel of ``method`` under ``privacy.mode=mode``: ``(PRIVATISED, how)`` or ``(REFUSED, the one-line
    error)``. The run starts only where none is refused."""
    info = get_method(method)
    where = f"privacy.mode={mode}" if mode != "none" else "privacy.secure_aggregation=true"
    if info.split_learning:
        line = (
            f"{where}: {method} is split learning, whose clients send the cut layer's activations every local step "
            "(neither a round's clipping, DP-SGD's per-sample noise nor a secure sum covers them); use a method of "
            "another family (raysim ls methods)"
        )
        return {"activations": (REFUSED, line)}
    cls = info.cls
    extras = extras_of(cls)
    if cls.each_update and (mode == "user" or secure_aggregation):
        cause = "privacy.mode=user" if mode == "user" else "privacy.secure_aggregation=true"
        line = (
            f"{cause}: {method} cannot run where the server sees only the cohort's sum: {cls.each_update}; use a "
            "method whose server step averages the updates (e.g. fedavg, fedvpt, sgpt)"
        )
        return {channel: (REFUSED, line) for channel in ("params", *extras)}
    if mode == "record":
        user = outcomes(method, "user", secure_aggregation).values()
        instead = "use another method" if any(state == REFUSED for state, _ in user) else "use privacy.mode=user"
        if cls.record_dp:
            line = f"{where}: {method} is not covered by record-level DP-SGD: {cls.record_dp}; {instead}"
            return {channel: (REFUSED, line) for channel in ("params", *extras)}
        out = {"params": (PRIVATISED, "trained with per-sample clipping and noise (DP-SGD)")}
        for name, what in extras.items():  # computed from the rows outside DP-SGD's steps
            line = f"{where}: {method} sends {name} ({what}), which DP-SGD does not privatise; {instead}"
            out[name] = (REFUSED, line)
        return out
    if mode != "user":
        return {channel: (PRIVATISED, "inside the cohort's secure sum") for channel in ("params", *extras)}
    if cls.user_dp:
        line = f"{where}: {method} is not covered by user-level DP: {cls.user_dp}; use another method"
        return {channel: (REFUSED, line) for channel in ("params", *extras)}
    out = {"params": (PRIVATISED, "the update (trained minus received) clipped to C; the sum noised")}
    for name, what in extras.items():
        share = cls.private_extras.get(name)
        if share is None:
            line = (
                f"{where}: {method} sends {name} ({what}) and declares no way to privatise it; use a method that "
                "sends only parameters, or give the method a bounded form of it (SendsExtras.private_extras)"
            )
            out[name] = (REFUSED, line)
        elif share == 0:
            out[name] = (PRIVATISED, "not sent (the server's step on one noised mean does not read it)")
        else:
            out[name] = (PRIVATISED, f"bounded, clipped to {share:g} x C and noised with the update")
    return out


def check(config) -> None:
    """Refuse, in one line, a run whose privacy settings cannot cover every channel its method sends."""
    p = config.privacy
    if not p.private and not p.secure_aggregation:
        return
    for state, line in outcomes(config.method, p.mode, p.secure_aggregation).values():
        if state == REFUSED:
            raise ConfigError(line)
