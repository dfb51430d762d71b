"""Ray's token authentication for a run: the token file of a local Ray (:func:`ensure_token`), the quiet default, and
a cluster's refusal of this machine's token found in seconds (:func:`refuse_unless_admitted`). Ray reads the token
from ``$RAY_AUTH_TOKEN``, else the file ``$RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token`` (Ray's token
authentication guide), and sends it only where ``RAY_AUTH_MODE=token``, or to a local Ray it starts or finds."""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from raysim.base.errors import ConfigError

RAY_AUTH_MODE = "RAY_AUTH_MODE"  # Ray's token authentication, on for a local Ray unless set to disabled
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
GET_TOKEN = "'ray get-auth-token' on its head prints it"


def default_token_path() -> Path:
    """Ray's default token file, ``~/.ray/auth_token``."""
    return Path.home() / ".ray" / "auth_token"


def quiet_default_auth(record: logging.LogRecord) -> bool:
    """Drop Ray's warning that it turned token authentication on for a local Ray (the default raysim keeps)."""
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def ensure_token(path: Path) -> None:
    """Write a new random token to ``path`` (Ray's default token file, which ``ray get-auth-token`` prints) unless
    one is there: whole or not at all (a temporary file linked into place), so that runs starting at once all read
    the one that won, where Ray's own generation writes the file in place and the last writer wins."""
    if path.exists() or os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32))
        os.link(temporary, path)
    except FileExistsError:  # another run's token won
        pass
    finally:
        temporary.unlink(missing_ok=True)


def user_token() -> tuple[str | None, str]:
    """(the token Ray would send, where it comes from), in Ray's order; None where there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip(), "$RAY_AUTH_TOKEN"
    path = Path(os.environ["RAY_AUTH_TOKEN_PATH"]) if os.environ.get("RAY_AUTH_TOKEN_PATH") else default_token_path()
    try:
        return path.read_text().strip() or None, str(path)
    except OSError:
        return None, str(path)


def refuse_unless_admitted(channel, address: str, given: str, timeout_s: float) -> None:
    """Fail in seconds where the cluster whose GCS answers on ``channel`` asks for a token and this run would send
    none (Ray sends none to an address it is given unless ``RAY_AUTH_MODE=token``) or one it refuses: Ray's own
    connection retries for about 20 s, printing each refusal, and then names neither the token nor the fix. Asks
    the GCS for the cluster's id, the first thing a driver asks; any answer but a refused token is left to Ray."""
    import grpc  # Ray's own dependency
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    sends = os.environ.get(RAY_AUTH_MODE, "").lower() == "token"
    token, source = user_token() if sends else (None, "")
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
            gcs_service_pb2.GetClusterIdRequest(),
            timeout=timeout_s,
            metadata=(("authorization", f"Bearer {token}"),) if token else (),
        )
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.UNAUTHENTICATED:
            return
        if token:
            raise ConfigError(
                f"the Ray cluster at {address!r} refused this machine's token (from {source}); put the cluster's "
                f"there ({GET_TOKEN}), or drop {given}"
            ) from None
        if sends:
            raise ConfigError(
                f"the Ray cluster at {address!r} asks for a token, and RAY_AUTH_MODE=token finds none ({source}); "
                f"put the cluster's there ({GET_TOKEN}), or drop {given}"
            ) from None
        raise ConfigError(
            f"the Ray cluster at {address!r} asks for a token, which Ray sends to a given address only under "
            f"RAY_AUTH_MODE=token: export RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token "
            f"({GET_TOKEN}), or drop {given}"
        ) from None
