"""cluster/*.yaml pass Ray's own cluster-config validation (offline: no cloud API, no credentials)."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
CONFIGS = {"aws.yaml": "aws", "gcp.yaml": "gcp", "onprem.yaml": "local"}


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def prepared(config: dict) -> dict:
    """What `ray up` validates: the config merged with the provider's defaults (commands._bootstrap_config)."""
    return prepare_config(copy.deepcopy(config))


def test_the_folder_holds_exactly_the_documented_configs():
    assert sorted(p.name for p in CLUSTER.glob("*.yaml")) == sorted(CONFIGS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_passes_rays_validation(name):
    config = load(name)
    assert config["provider"]["type"] == CONFIGS[name]
    assert config["cluster_name"] == f"raysim-{name.removesuffix('.yaml')}"
    for key in (
        "max_workers",
        "idle_timeout_minutes",
        "setup_commands",
        "head_start_ray_commands",
        "worker_start_ray_commands",
        "file_mounts",
    ):
        assert key in config, f"{name} lacks {key}"
    validate_config(prepared(config))  # raises on any schema or consistency error


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_cloud_configs_have_a_head_and_gpu_workers(name):
    config = load(name)
    types = config["available_node_types"]
    head = config["head_node_type"]
    workers = {k: v for k, v in types.items() if k != head}
    assert workers and all(v["resources"].get("GPU", 0) >= 1 for v in workers.values())
    assert sum(v.get("min_workers", 0) for v in workers.values()) <= config["max_workers"]


def test_onprem_config_names_its_hosts():
    provider = load("onprem.yaml")["provider"]
    assert provider["head_ip"] and provider["worker_ips"]
    assert "available_node_types" not in load("onprem.yaml")  # the local provider refuses node types


def test_onprem_starts_ray_as_a_real_two_node_cluster_showed_it_must():
    """What bench/cluster_launch.sh needed on two nodes: the autoscaler v1 (v2 starts no worker_ips), each node known by
    the address it was reached at over SSH (else the autoscaler restarts it mid-run), and token authentication with
    the launcher's token copied to every node."""
    config = load("onprem.yaml")
    starts = [c for c in [*config["head_start_ray_commands"], *config["worker_start_ray_commands"]] if "ray start" in c]
    assert len(starts) == 2 and "RAY_enable_autoscaler_v2=0" in starts[0]
    for command in starts:
        assert "RAY_AUTH_MODE=token" in command and "--node-ip-address=$NODE_IP" in command
        assignment = command[command.index("NODE_IP=") : command.index(";", command.index("NODE_IP="))]
        shown = subprocess.run(
            ["bash", "-c", f"{assignment}; echo $NODE_IP"],
            env={"SSH_CONNECTION": "192.0.2.99 50022 192.0.2.11 22", "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert shown == "192.0.2.11"  # the node's own address, not the client's
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_commands_install_with_constraints_and_keep_the_dashboard_local(name):
    config = prepared(load(name))  # after the defaults merge: a missing key would bring Ray's 0.0.0.0 back
    head = " ".join(config["head_start_ray_commands"])
    assert "ray start --head" in head
    assert "--dashboard-host=127.0.0.1" in head
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head
    assert any("ray start --address=$RAY_HEAD_IP:6379" in c for c in config["worker_start_ray_commands"])
    for command in [*config["head_start_ray_commands"], *config["worker_start_ray_commands"]]:
        if "ray start" in command:  # a worker that reserved no GPU sees none (Ray 2.60 stopped hiding them)
            assert "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1 ray start" in command
            assert command.startswith("ulimit -n 65536")  # Ray opens a file per connection; the default is often 1024
    installs = [c for c in config["setup_commands"] if "pip install" in c and "-e ." in c]
    assert installs and all("-c constraints.txt" in c and "~/raysim" in c for c in installs)
    assert config["file_mounts"]["~/raysim"] == "."
    assert "0.0.0.0" not in yaml.safe_dump(config)  # no port opened to the world, no dashboard on all interfaces


def test_every_config_is_in_the_readme():
    readme = (CLUSTER / "README.md").read_text()
    for name in CONFIGS:
        assert f"cluster/{name}" in readme, name
    assert "ray up cluster/aws.yaml" in readme and "ray down cluster/aws.yaml" in readme
    assert "--gpus-per-client 0.25" in readme


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_validator_rejects_a_broken_copy(name):
    """The same validation fails on a misspelled top-level key, so the checks above can fail."""
    broken = load(name)
    broken["max_worker"] = broken.pop("max_workers")
    with pytest.raises(jsonschema.ValidationError, match="max_worker"):
        validate_config(prepared(broken))

    wrong_type = load(name)
    wrong_type["head_start_ray_commands"] = "ray start --head"  # a string, not a list of commands
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepared(wrong_type))
