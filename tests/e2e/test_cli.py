"""The CLI end to end: a run read back from MLflow, and the bad-input table (one line, exit 2, no run left)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file, save_file

from raysim.cli import main
from raysim.config import presets
from raysim.core.registry import METHODS
from raysim.testing.console import own_lines
from raysim.tracking import checkpoint as ckpt
from raysim.tracking import provenance

QUICK = ["--preset", "quick", "--no-progress", "--set", "fedvpt.prompt_length=2"]


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def runs_in(uri):
    client = MlflowClient(tracking_uri=uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def _quick_run(tracking_uri, backend, *extra):
    result = invoke(
        "run",
        "fedvpt",
        *QUICK,
        "--backend",
        backend,
        "--workers",
        "2",
        "--cpus-per-client",
        "0.5",
        "--tracking-uri",
        tracking_uri,
        "--experiment",
        "e2e",
        *extra,
    )
    assert result.exit_code == 0, result.output
    assert "global_acc" in result.output and "mean (last 10)" in result.output
    return result


def test_runs_are_tracked_named_and_traced_in_mlflow(ray_session, tracking_uri):
    """Both backends, then a run that differs in one option: the same config gets the same name on either backend
    (where a run goes is not what it computes), the other option another; every run carries its provenance, its data
    set as an input, the values it resolved as params, per-round and summary metrics and its artifacts."""
    for backend in ("sequential", "ray"):
        _quick_run(tracking_uri, backend)
    _quick_run(tracking_uri, "sequential", "--set", "train.lr=0.01")
    client = MlflowClient(tracking_uri=tracking_uri)
    runs = sorted(runs_in(tracking_uri), key=lambda r: r.info.start_time)
    names = [r.info.run_name for r in runs]
    assert names[0] == names[1] != names[2], names
    assert re.fullmatch(r"fedvpt-[0-9a-f]{6}-s0-synthetic-dirichlet1-20c", names[0]), names
    assert names[2][:7] == names[0][:7] and names[2][13:] == names[0][13:]  # only the setting's hash differs
    git_commit = provenance.git_tags().get("mlflow.source.git.commit")
    for run, backend in zip(runs, ("sequential", "ray", "sequential")):
        assert run.info.status == "FINISHED"
        params, tags = run.data.params, run.data.tags
        assert params["federation.clients"] == "20" and params["fedvpt.prompt_length"] == "2"
        # the values the run resolved, not placeholders: its name, store, checkpoint folder, pool, threads, precision
        assert params["tracking.run_name"] == run.info.run_name and params["tracking.tracking_uri"] == tracking_uri
        assert params["checkpoint.dir"] == str(Path(tracking_uri[len("sqlite:///") :]).parent / "checkpoints")
        assert params["resources.workers"] == ("1" if backend == "sequential" else "2")
        assert params["resources.threads"] == "1" and params["train.precision"] in ("fp32", "bf16")
        assert not {k for k, v in params.items() if v in ("()", "-1")}
        assert tags["method"] == "fedvpt" and tags["family"] == "global" and tags["dataset"] == "synthetic"
        assert tags["backend"] == backend and tags["precision"] == params["train.precision"]
        assert tags["mlflow.note.content"].startswith("fedvpt (global) on synthetic, dirichlet alpha=1, 20 clients")
        assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"] and tags["mlflow.user"]
        assert tags["version.raysim"] and tags["version.torch"] and tags["version.ray"] and tags["hardware.cpu"]
        assert tags.get("mlflow.source.git.commit") == git_commit  # the package's checkout, whatever ran it
        (dataset,) = run.inputs.dataset_inputs
        assert dataset.dataset.name == "synthetic" and len(dataset.dataset.digest) == 8
        assert dataset.dataset.digest == runs[0].inputs.dataset_inputs[0].dataset.digest  # the same partition
        history = client.get_metric_history(run.info.run_id, "global_acc")
        assert [m.step for m in history] == [1, 2, 3]
        up = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "bytes_up"), key=lambda m: m.step)]
        total = client.get_metric_history(run.info.run_id, "bytes_up_total")
        assert [m.value for m in sorted(total, key=lambda m: m.step)] == pytest.approx(np.cumsum(up).tolist())
        for key in (
            "local_acc",
            "worst_local_acc",
            "sigma_client",
            "bytes_down",
            "bytes_down_total",
            "round_time_s",
            "train_samples_per_s",
            "summary/global_acc_mean",
            "summary/worst_local_acc_final",
        ):
            assert key in run.data.metrics, key
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {
            "config.yaml",
            "summary.json",
            "accuracy_curves.png",
            "client_accuracy.png",
            "partition.png",
            "partition_summary.json",
            "partition_counts.safetensors",
            "global_state.safetensors",
            "participation.safetensors",
        } <= artifacts


def _mismatched_weights(tmp_path):
    import torch

    path = tmp_path / "other.safetensors"
    save_file({"patch_embed.proj.weight": torch.zeros(8, 3, 2, 2)}, str(path))
    return str(path)


SYN = ("--dataset", "synthetic", "--set")
# eight levels of YAML aliases, each a list of nine of the level below: 391 bytes that stand for 9^8 numbers
ALIASES = "&a0 [" + ",".join("0" * 9) + "]"
for level in range(1, 8):
    ALIASES = f"&a{level} [{ALIASES}, {', '.join([f'*a{level - 1}'] * 8)}]"
# refused by the model's build, here in-process: the Ray path of such an error (the pool's first worker builds the
# model) is the MISMATCHED weights case's
BUILT = ("--backend", "sequential", *SYN)
BAD_INPUTS = [
    (["run", "fedsgd"], "unknown method 'fedsgd'; valid methods: afl, ditto, fed-dualprompt, fedavg"),
    (["run", "fedvpt", "--dataset", "mnist"], "valid datasets: cifar10, cifar100, digit-five, digits,"),
    (["run", "fedvpt", "--partition", "zipf"], "valid partitions: dirichlet"),
    (
        ["run", "fedvpt", "--dataset", "digits", "--partition", "pathological", "--set", "data.s=12"],
        "s=12 is larger than the number of classes (10)",
    ),
    (["run", "fedvpt", "--partition", "dirichlet", "--set", "data.alpha=0"], "data.alpha=0.0 must be > 0"),
    (
        ["run", "fedvpt", "--partition", "pathological", "--set", "data.alpha=0.1"],
        "data.alpha is the dirichlet partition's, and the partition here is pathological (reads s, class_sets)",
    ),
    (["run", "fedvpt", "--set", "data.dif=5"], "drop data.dif, or set data.partition=domains"),
    (["run", "fedvpt", "--participation", "1.5"], "participation=1.5 must be in (0, 1]"),
    (["run", "fedvpt", "--participation", "0"], "participation=0.0 must be in (0, 1]"),
    (["run", "fedvpt", "--clients", "4", "--workers", "8"], "workers=8 is more than the 4 clients"),
    (["run", "fedvpt", "--weights", "/nope/w.safetensors"], "weights file /nope/w.safetensors does not exist"),
    (["run", "fedvpt", "--dataset", "synthetic", "--weights", "MISMATCHED"], "raysim_vit_tiny_p4_32"),
    (["run", "fedvpt", "--tracking-uri", "sqlite:////proc/raysim/mlflow.db"], "is not writable"),
    (["run", "fedvpt", "--clients", "two"], "'two' is not a valid integer"),
    (["run", "fedvpt", "--set", "rounds=3"], "must look like section.key=value"),
    (["run", "fedvpt", "--preset", "nope"], "valid presets"),
    (["ls", "things"], "'things' is not one of"),
    (["run", "sgpt", *SYN, "sgpt.groups=0"], "sgpt.groups=0 must be at least 1"),
    (
        ["run", "sgpt", *BUILT, "sgpt.group_blocks=[2,6]"],
        "sgpt.group_blocks=[2, 6] must be distinct block indices in [0, 5] (the backbone has 6 blocks)",
    ),
    (["run", "sgpt", *BUILT, "sgpt.select_layer=7"], "sgpt.select_layer=7 is past the backbone's 6 blocks"),
    (["run", "sgpt", *SYN, "sgpt.bcd=random"], "sgpt.bcd='random' is not one of joint, bcd, bcd-inv"),
    (["run", "sgpt", *BUILT, "sgpt.groups=500"], "500 orthogonal keys need groups <= the backbone width 192"),
    (["run", "fgpt-u", *SYN, "fgpt.k=11"], "fgpt.k=11 must be in 1..groups=10"),
    (["run", "fedvpt", *SYN, "fedvpt.prompt_length=100000"], "fedvpt.prompt_length=100000 must be at most 1000 (a"),
    (["run", "pfedhn", *BUILT, "pfedhn.hidden=100000000"], "pfedhn's model and state do not fit in memory (an"),
    (["run", "fed-dualprompt", *SYN, "fed-dualprompt.expert_length=5000"], "expert_length=5000 must be at most 1000"),
    (["run", "fedem", *SYN, "fedem.components=100000000"], "fedem.components=100000000 must be at most 100"),
    (["run", "pfedhn", *SYN, "pfedhn.hidden_layers=100000000"], "pfedhn.hidden_layers=100000000 must be at most 100"),
    (["run", "fedvpt", *SYN, "data.image_size=100000"], "data.image_size=100000 must be at most 4096"),
    (["run", "fedvpt", *SYN, "resources.threads=100000"], "resources.threads=100000 must be at most 1024"),
    (["run", "fedvpt", "--cpus-per-client", "100000"], "cpus_per_client=100000.0 must be at most 1024"),
    (["run", "fedvpt", "--experiment", "e" * 300], "tracking.experiment=" + "e" * 97 + "... must be at most 200"),
    (["run", "sgpt", *SYN, "sgpt.group_blocks=" + ALIASES], "blocks=[[...], [...], [...], [...], [...], [...], [...],"),
    (["tune", "fedvpt", "--name", "s" * 300], "--name is 300 characters long; a folder's name takes at most 200"),
    (["run", "fedvpt", "--set", "checkpoint.dir=/tmp/" + "d" * 300], "File name too long; give another path"),
    (["run", "fedvpt", "--set", "systems.trace=/tmp"], "trace /tmp is a folder, not a file; pass a CSV or parquet"),
    (["run", "fedvpt", "--preset", "/dev/null"], "preset file /dev/null is not a regular file; a preset is a YAML"),
    (["run", "fedvpt", *SYN, "data.min_train_samples=100000"], "; lower data.min_train_samples to at most"),
    (["run", "fgpt", *BUILT, "fgpt.group_block=6"], "fgpt.group_block=6 is outside the backbone's blocks 0..5"),
    (["run", "fedgcr", *SYN, "fedgcr.clusters=0"], "fedgcr.clusters=0 must be at least 1"),
    (
        [
            "run",
            "fedgcr",
            "--dataset",
            "synthetic",
            "--partition",
            "domains",
            "--clients",
            "20",
            "--participation",
            "0.2",
        ],
        "fedgcr.clusters=5 (T') is more than the 4 clients taking part each round",
    ),
    (["run", "fedgcr", *SYN, "fedgcr.q=-1"], "fedgcr.q=-1.0 must be >= 0"),
    (["run", "fedgr", *SYN, "fedgcr.delta=1.5"], "fedgcr.delta=1.5 must be in [0, 1]"),
    (["run", "fedgcr", *SYN, "fedgcr.gamma=-0.1"], "fedgcr.gamma=-0.1 must be in [0, 1]"),
    (
        ["run", "fedgcr", "--dataset", "synthetic", "--partition", "iid"],
        "fedgcr reports sigma_type and cluster_acc per client type, and the partition 'iid' gives clients no type",
    ),
    (["run", "qffl", *SYN, "qffl.q=-0.5"], "qffl.q=-0.5 must be >= 0"),
    (["run", "fedvz", *SYN, "fedvz.eps=0"], "fedvz.eps=0.0 must be > 0 (the SPSA perturbation scale"),
    (["run", "fedvz", *SYN, "fedvz.eps=-1e-4"], "fedvz.eps=-0.0001 must be > 0"),
    (["run", "fedv", *SYN, "fedv.fedround=0"], "fedv.fedround=0 must be at least 1"),
    (
        ["run", "fedv", *BUILT, "fedv.head_blocks=4", "--set", "fedv.tail_blocks=2"],
        "fedv.head_blocks=4 + tail_blocks=2 leave the server none of the backbone's 6 blocks; keep head_blocks + "
        "tail_blocks <= 5",
    ),
    (["run", "fedvz", *SYN, "fedvz.tail_blocks=-1"], "must be >= 0 (blocks kept on the client)"),
    (["run", "festa", *SYN, "festa.lr_decay=0"], "festa.lr_decay=0.0 must be in (0, 1]"),
    (["run", "ditto", *SYN, "ditto.lam=-1"], "ditto.lam=-1.0 must be >= 0"),
    (["run", "fedvz", "--precision", "bf16"], "fedvz needs float32 client compute (SPSA's loss differences"),
    (["run", "sgpt", "--precision", "fp16"], "'fp16' is not one of 'auto', 'fp32', 'bf16'"),
    # config files, overrides, data folders, weights, stores (FILE:... are written by the test)
    (["run", "fedvpt", "--preset", "FILE:bad.yaml:federation: {rounds: ["], "preset FILE:bad.yaml is not valid YAML"),
    (
        ["run", "fedvpt", "--preset", "FILE:key.yaml:federation: {roundz: 3}"],
        "unknown key federation.roundz; valid keys",
    ),
    (["run", "fedvpt", "--preset", "FILE:sec.yaml:feds: {rounds: 3}"], "unknown section 'feds' for method fedvpt"),
    (
        ["run", "fedvpt", "--preset", "FILE:type.yaml:federation: {rounds: many}"],
        "federation.rounds='many' has the wrong type",
    ),
    (["run", "fedvpt", "--preset", "FILE:list.yaml:- 1"], "must map section names to mappings"),
    (["run", "fedvpt", "--preset", "FILE:blank.yaml:# rounds: 3"], "sets nothing (it is empty, or only comments)"),
    (["run", "fedvpt", "--preset", "/nope/p.yaml"], "preset file /nope/p.yaml does not exist"),
    (["run", "fedvpt", "--set", "federation.roundz=3"], "unknown key federation.roundz"),
    (["run", "fedvpt", "--set", "checkpoint.every=-1"], "checkpoint.every=-1 must be >= 0"),
    (["run", "fedvpt", "--set", "checkpoint.keep=-2"], "checkpoint.keep=-2 must be >= 0"),
    (
        ["run", "fedvpt", "--dataset", "cifar10", "--data-dir", "/nope"],
        "needs --data-dir pointing at cifar-10-batches-bin/",
    ),
    (
        ["run", "fedvpt", "--dataset", "pacs", "--data-dir", "EMPTY"],
        "dataset 'pacs' needs --data-dir pointing at a folder",
    ),
    (["run", "fedvpt", "--dataset", "parquet", "--data-dir", "EMPTY"], "could not read parquet at"),
    (
        [
            "run",
            "fedvpt",
            "--backend",
            "sequential",
            "--dataset",
            "synthetic",
            "--weights",
            "FILE:w.safetensors:garbage",
        ],
        "is not a readable safetensors file",
    ),
    (["run", "fedvpt", "--tracking-uri", "http://127.0.0.1:9"], "MLflow server http://127.0.0.1:9 does not answer"),
    (["run", "fedvpt", "--tracking-uri", "HTTPS://127.0.0.1:9"], "MLflow server https://127.0.0.1:9 does not answer"),
    (["run", "fedvpt", "--tracking-uri", "EMPTY"], "is a plain folder, which MLflow 3 refuses"),
    (
        ["run", "fedvpt", "--tracking-uri", "sqlite:///never.db", "--backend"],
        "Option '--backend' requires an argument. (see 'raysim run --help')",
    ),
    (["run", "fedvpt", "--preset", ""], "--preset '' is empty; give a value or leave --preset out"),
    (["run", "fedvpt", "--tracking-uri", ""], "tracking.tracking_uri= must not be empty; leave it out for the default"),
    (["run", "fedvpt", "--weights", "EMPTY"], "empty is a folder, not a file; pass a safetensors file saved from"),
    (["run", "fedvpt", "--tracking-uri", "bogus://x"], "tracking store 'bogus://x': MLflow has no store for bogus://"),
    (["report", "raysim", "--tracking-uri", "bogus://x"], "MLflow has no store for bogus://"),
    # the virtual clock (docs/systems.md)
    (["run", "fedvpt", "--set", "systems.trace=/nope/t.csv"], "trace /nope/t.csv does not exist"),
    (["run", "fedvpt", *SYN, "systems.trace=FILE:neg.csv:client,speed\n0,-1"], "column speed must hold positive"),
    (["run", "fedvpt", *SYN, "systems.trace=FILE:who.csv:client\n500"], "references client 500; the run has 100"),
    (["run", "fedvpt", *SYN, "systems.trace=FILE:col.csv:client,gpu\n0,1"], "unknown columns gpu; valid columns"),
    (["run", "fedvpt", "--set", "federation.deadline_s=-1"], "federation.deadline_s=-1.0 must be >= 0"),
    (["run", "fedvpt", "--set", "systems.dropout=1"], "systems.dropout=1.0 must be in [0, 1)"),
    (["run", "fedvpt", "--set", "systems.speed=gamma:1,2"], "unknown distribution 'gamma'; valid: uniform, lognormal"),
    (["run", "fedvpt", "--set", "systems.speed=lognormal:"], "systems.speed='lognormal:' is not a positive number or"),
    (["run", "fedvpt", "--set", "federation.stragglers=skip"], "'skip' is not one of drop, wait, partial"),
    (["run", "fedv", "--set", "federation.deadline_s=5"], "fedv is split learning: its traffic is per local step"),
    (["run", "fedvpt", "--set", "systems.tiers=head,half"], "'half' is not a capacity tier; a tier is head, first-K"),
    (["run", "sgpt", "--set", "systems.tiers=head,all"], "sgpt does not train by capacity tier; methods that do:"),
    (["run", "sgpt", *SYN, "systems.trace=FILE:tier.csv:client,tier\n0,head"], "sgpt does not train by capacity"),
    (["run", "fedvpt", *SYN, "systems.trace=FILE:t2.csv:client,tier\n0,last-0"], "column tier: 'last-0' is not"),
    # paths a run writes, and columns it reads, checked before the run exists
    (["run", "fedvpt", "--set", "checkpoint.dir=/proc/raysim/ckpt"], "checkpoint.dir /proc/raysim/ckpt is not"),
    (["run", "fedvpt", "--set", "checkpoint.dir=FILE:taken:x"], "is not writable (cannot create files in"),
    (
        ["run", "fedvpt", "--dataset", "parquet", "--data-dir", "FLOAT_LABELS"],
        "column 'label' must hold whole numbers >= 0, but row 0 holds 0.5; write it as integer indices",
    ),
    # resources Ray would refuse
    (["run", "fedvpt", "--cpus-per-client", "0"], "cpus_per_client=0 with gpus_per_client=0 reserves nothing"),
    (["run", "fedvpt", "--gpus-per-client", "0.00001"], "gpus_per_client=1e-05 is finer than Ray's unit of 0.0001"),
    pytest.param(
        ["run", "fedvpt", "--backend", "sequential", "--gpus-per-client", "1"],
        "resources.gpus_per_client=1 asks for a GPU, but torch sees none in this process",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU to give"),
    ),
    (
        [
            "run",
            "fedvpt",
            "--clients",
            "10",
            *SYN,
            "federation.unseen_fraction=0.5",
            "--set",
            "federation.eval_clients=1",
        ],
        "federation.eval_clients=1's sample holds no training client with test rows",
    ),
    # numbers no setting takes
    (["run", "fedvpt", "--seed", "-1"], "federation.seed=-1 must be >= 0"),
    (["run", "fedvpt", "--set", "data.alpha=.inf"], "data.alpha=inf must be a finite number"),
    (["run", "fedvpt", "--experiment", ""], "tracking.experiment= must not be empty"),
    (["run", "--resume", "/nope/run"], "--resume '/nope/run' is neither a checkpoint folder nor a run"),
    (["run", "--resume", "EMPTY"], "holds no checkpoint (no round-*/manifest.json)"),
    (["run"], "Missing argument 'METHOD'"),
    (["run", "--preset", "FILE:noname.yaml:federation: {rounds: 1}"], "--preset FILE that names one, or --resume"),
    (["run", "--preset", "FILE:bad.yaml:method: fedavgg"], "names method 'fedavgg', which is not registered; valid"),
    (["run", "--preset", "/proc/self/mem"], "preset file /proc/self/mem cannot be read (Input/output error)"),
]


def _float_labels(tmp_path) -> str:
    """A parquet in the documented layout whose labels are 0.5, 1.5, ...: not class indices."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raysim.data.parquet import png_table

    images = np.zeros((8, 8, 8, 3), np.uint8)
    table = png_table(images, np.arange(8) % 2, np.array(["train"] * 6 + ["test"] * 2))
    table = table.set_column(table.schema.get_field_index("label"), "label", pa.array(np.arange(8) % 2 + 0.5))
    pq.write_table(table, tmp_path / "float-labels.parquet")
    return str(tmp_path / "float-labels.parquet")


def _materialise(arg: str, tmp_path) -> str:
    """FILE:name:text -> a file with that text (also as a --set value: key=FILE:name:text); EMPTY -> an empty
    folder; FLOAT_LABELS -> a parquet whose labels are not whole numbers."""
    if arg == "FLOAT_LABELS":
        return _float_labels(tmp_path)
    if "=FILE:" in arg:
        key, text = arg.split("=", 1)
        return f"{key}={_materialise(text, tmp_path)}"
    if arg == "EMPTY":
        (tmp_path / "empty").mkdir(exist_ok=True)
        return str(tmp_path / "empty")
    if arg.startswith("FILE:"):
        _, name, text = arg.split(":", 2)
        (tmp_path / name).write_text(text + "\n")
        return str(tmp_path / name)
    return arg


@pytest.mark.parametrize(
    "args, fragment", BAD_INPUTS, ids=[" ".join(getattr(case, "values", case)[0]) for case in BAD_INPUTS]
)
def test_bad_input_is_one_line_exit_2_and_leaves_no_run(ray_session, tmp_path, args, fragment):
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # no store yet: the command must not create one
    args = [_mismatched_weights(tmp_path) if a == "MISMATCHED" else _materialise(a, tmp_path) for a in args]
    fragment = fragment.replace("FILE:bad.yaml", str(tmp_path / "bad.yaml"))
    if "--tracking-uri" not in args:
        args += ["--tracking-uri", tracking_uri] if args[0] == "run" else []
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    # Ray forwards earlier tests' actor logs asynchronously ("(Coordinator pid=...) ..."); they are not ours.
    lines = own_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("raysim: error: "), result.stderr
    assert fragment in lines[0]
    assert not (tmp_path / "mlflow.db").exists()  # nothing written: the store was never created
    assert not (tmp_path / "checkpoints").exists()


def test_real_console_script_help_ls_and_one_line_errors(tmp_path):
    def raysim(*args):
        return subprocess.run(
            [sys.executable, "-m", "raysim.cli", *args], capture_output=True, text=True, cwd=tmp_path, timeout=120
        )

    help_text = raysim("run", "--help").stdout
    for flag in (
        "--clients",
        "--rounds",
        "--participation",
        "--local-epochs",
        "--dataset",
        "--partition",
        "--backbone",
        "--weights",
        "--workers",
        "--gpus-per-client",
        "--cpus-per-client",
        "--seed",
        "--eval-every",
        "--preset",
        "--set",
        "--tracking-uri",
        "--experiment",
        "--address",
    ):
        assert flag in help_text, flag
    for bare in ([], ["data"]):  # a group without its command prints its help, as click did before 8.2
        shown = raysim(*bare)
        assert shown.returncode == 0 and shown.stdout.startswith("Usage: ") and not shown.stderr, shown.stderr
        assert len(shown.stdout.splitlines()) > 5
    listing = raysim("ls").stdout
    for name in ("fedavg", "fedvpt", "fedvpt-d", "head-tune", "fedprox", "digits", "pathological", "quick"):
        assert name in listing
    assert raysim("ls", "methods", "--names").stdout.split() == list(METHODS)  # for m in $(raysim ls methods --names)
    assert raysim("ls", "presets", "--names").stdout.split() == sorted(presets())
    bad = raysim("run", "fedvpt", "--address", "127.0.0.1:9", "--no-progress")
    assert bad.returncode == 2
    assert own_lines(bad.stderr)[-1].startswith("raysim: error: could not connect to Ray at '127.0.0.1:9'")
    assert "Traceback" not in bad.stderr
    shown_nowhere = raysim("run", "fedvpt", "--backend", "sequential", "--dashboard")  # before the data are read
    assert shown_nowhere.returncode == 2 and "Traceback" not in shown_nowhere.stderr
    assert own_lines(shown_nowhere.stderr)[-1].endswith("drop --dashboard, or use --backend ray")
    assert not (tmp_path / "raysim-runs").exists()


def test_the_shell_completes_commands_methods_and_presets(tmp_path):
    """click's completion, as a shell asks for it (``_RAYSIM_COMPLETE=bash_complete``; docs/reference/cli.md)."""

    def completed(*words: str) -> list[str]:
        env = {**os.environ, "_RAYSIM_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(["raysim", *words])}
        env["COMP_CWORD"] = str(len(words))
        done = subprocess.run([sys.executable, "-m", "raysim.cli"], env=env, capture_output=True, text=True, timeout=60)
        return done.stdout.split()

    assert completed("ru") == ["plain,run"]
    assert completed("compare", "fedavg", "fg") == ["plain,fgpt", "plain,fgpt-u"]
    assert completed("run", "sgpt", "--preset", "qu") == ["plain,quick", "file,qu"]


def test_a_ray_runs_driver_imports_no_torch_and_logs_what_the_coordinator_wrote(tmp_path):
    """A whole Ray run of SGPT in a fresh process: its driver never imports torch (the model is built by the first
    worker, the state lives in the coordinator, the driver reads checkpoints' manifests only), and the files made
    where the state lives are the run's artifacts: the final global state, equal to the last checkpoint's, and SGPT's
    selection figures, with its run-level metric."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    probe = (
        "import atexit, sys\n"
        "heavy = ('torch', 'safetensors.torch', 'timm')\n"
        "atexit.register(lambda: print('imported:', [m for m in heavy if m in sys.modules]))\n"
        "from raysim.cli import main\n"
        "main()"
    )
    command = ["run", "sgpt", "--preset", "quick", "--no-progress", "--workers", "1", "--cpus-per-client", "0.5"]
    done = subprocess.run(
        [sys.executable, "-c", probe, *command, "--tracking-uri", uri],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("imported: []"), done.stdout
    (run,) = runs_in(uri)
    client = MlflowClient(uri)
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    wanted = {"global_state.safetensors", "selection_map.png", "selection_stability.png", "selection_counts.json"}
    assert wanted <= logged, logged
    assert "selection_instability" in run.data.metrics
    final = load_file(client.download_artifacts(run.info.run_id, "global_state.safetensors", str(tmp_path)))
    assert not (tmp_path / "checkpoints" / run.info.run_id / "results").exists()  # the files are MLflow's now
    (last,) = ckpt.rounds_in(tmp_path / "checkpoints" / run.info.run_id)[-1:]
    saved = load_file(str(last / ckpt.TENSORS))
    assert final.keys() == saved.keys() and all(torch.equal(final[k], saved[k]) for k in final)


@pytest.fixture(scope="module")
def finished_run(ray_session, tmp_path_factory):
    """A finished 3-round run with its checkpoints: (store URI, run id, run's checkpoint folder)."""
    folder = tmp_path_factory.mktemp("finished")
    uri = f"sqlite:///{folder}/mlflow.db"
    result = invoke("run", "fedvpt", *QUICK, "--backend", "sequential", "--tracking-uri", uri)
    assert result.exit_code == 0, result.output
    (run,) = runs_in(uri)
    return uri, run.info.run_id, folder / "checkpoints" / run.info.run_id


def test_a_runs_saved_config_is_a_preset_that_names_its_method(finished_run, tmp_path):
    """``config.yaml`` (logged with every run) reruns the run as a preset, its ``method:`` naming the method; given
    another method, the run says it runs that one on the preset's settings."""
    uri, run_id, _ = finished_run
    saved = MlflowClient(uri).download_artifacts(run_id, "config.yaml", str(tmp_path))
    again = invoke("run", "--preset", saved, "--no-progress", "--tracking-uri", uri)
    assert again.exit_code == 0, again.output
    first, rerun = sorted(runs_in(uri), key=lambda r: r.info.start_time)[:2]
    assert rerun.data.tags["method"] == "fedvpt" and rerun.data.params == first.data.params
    other = CliRunner().invoke(main, ["run", "head-tune", "--preset", saved, "--rounds", "1", "--no-progress"])
    assert other.exit_code == 0, other.output
    assert (
        f"raysim: preset {saved} was saved for fedvpt; running head-tune on its settings (fedvpt's own options are "
        "not used)" in other.stderr
    )


def _copy_with(run_folder, tmp_path, corrupt=False, state=None, **manifest_changes):
    """A copy of the run's checkpoints, the newest changed: its manifest by ``manifest_changes``, its state file
    damaged (``corrupt``) or replaced by ``state``'s bytes with the manifest's SHA-256 to match."""
    import json
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_folder, copy)
    newest = sorted(copy.glob("round-*"))[-1]
    if state is not None:
        (newest / "state.safetensors").write_bytes(state)
        manifest_changes["sha256"] = ckpt._sha256(newest / "state.safetensors")
    manifest = json.loads((newest / "manifest.json").read_text())
    (newest / "manifest.json").write_text(json.dumps({**manifest, **manifest_changes}))
    if corrupt:
        (newest / "state.safetensors").write_bytes((newest / "state.safetensors").read_bytes()[:-4] + b"\0\0\0\0")
    return str(copy)


RESUME_INPUTS = [
    (["run", "sgpt", "--resume", "RUN"], "is a fedvpt run, not sgpt; use 'raysim run fedvpt --resume ...'"),
    (["run", "--resume", "RUN"], "has already run 3 of its 3 rounds; pass --rounds N with N > 3 to extend it"),
    (["run", "--resume", "RUN", "--rounds", "5", "--dataset", "digits"], "data.dataset cannot change when resuming"),
    (["run", "--resume", "RUN", "--rounds", "5", "--set", "train.lr=0.1"], "train.lr cannot change when resuming"),
    (["run", "--resume", "RUN", "--rounds", "5", "--preset", "quick"], "--preset cannot change a resumed run"),
    (["run", "--resume", "RUN", "--rounds", "5", "--experiment", "other"], "tracking.experiment cannot change when"),
    (
        ["run", "--resume", "RUN", "--rounds", "5", "--tracking-uri", "sqlite:////nope/other.db"],
        "--tracking-uri sqlite:////nope/other.db is not the store of run",
    ),
    (["run", "--resume", "CORRUPT", "--rounds", "5"], "does not match the SHA-256 in its manifest"),
    (["run", "--resume", "UNREADABLE", "--rounds", "5"], "state.safetensors is not a readable safetensors file"),
    (["run", "--resume", "OTHER_RUN", "--rounds", "5"], "MLflow run 0123abcd of the checkpoint is not in the store"),
    (
        ["run", "--resume", "NO_STORE", "--rounds", "5"],
        "the MLflow store sqlite:////nope/mlflow.db of the checkpoint does not exist",
    ),
    (
        ["run", "--resume", "0123abcd", "--tracking-uri", "STORE"],
        "is neither a checkpoint folder nor a run with checkpoints in",
    ),
]


@pytest.mark.parametrize("args, fragment", RESUME_INPUTS, ids=[" ".join(a) for a, _ in RESUME_INPUTS])
def test_bad_resume_target_is_one_line_exit_2_and_changes_nothing(finished_run, tmp_path, args, fragment):
    uri, run_id, run_folder = finished_run
    targets = {
        "RUN": str(run_folder),
        "STORE": uri,
        "CORRUPT": lambda: _copy_with(run_folder, tmp_path, corrupt=True),
        "UNREADABLE": lambda: _copy_with(run_folder, tmp_path, state=b"its hash matches, yet it holds no tensor"),
        "OTHER_RUN": lambda: _copy_with(run_folder, tmp_path, run_id="0123abcd"),
        "NO_STORE": lambda: _copy_with(run_folder, tmp_path, tracking_uri="sqlite:////nope/mlflow.db"),
    }
    args = [(targets[a]() if callable(targets[a]) else targets[a]) if a in targets else a for a in args]
    client = MlflowClient(tracking_uri=uri)
    before = (
        [p.name for p in run_folder.iterdir()],
        client.get_run(run_id).info.status,
        len(client.get_metric_history(run_id, "global_acc")),
    )
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = own_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("raysim: error: ") and fragment in lines[0], result.stderr
    assert before == (
        [p.name for p in run_folder.iterdir()],
        client.get_run(run_id).info.status,
        len(client.get_metric_history(run_id, "global_acc")),
    )


def test_resuming_a_run_deleted_in_mlflow_is_one_line_naming_the_restore(finished_run):
    uri, run_id, run_folder = finished_run
    client = MlflowClient(tracking_uri=uri)
    client.delete_run(run_id)
    try:
        result = CliRunner().invoke(main, ["run", "--resume", str(run_folder), "--rounds", "5"])
    finally:
        client.restore_run(run_id)
    assert result.exit_code == 2 and len(own_lines(result.stderr)) == 1, result.stderr
    assert f"is deleted in the store {uri}; restore it" in result.stderr and f"--run-id {run_id}" in result.stderr
    assert len(client.get_metric_history(run_id, "global_acc")) and not sorted(run_folder.glob("round-0004"))


@pytest.mark.parametrize(
    "args, what",
    [
        ([], "its MLflow store"),  # the default store, ./raysim-runs/mlflow.db
        (["--tracking-uri", "sqlite:///HEAD/mlflow.db"], "its checkpoints"),  # a store elsewhere, checkpoints here
    ],
)
def test_a_ray_job_writing_in_its_temporary_working_dir_is_refused(ray_session, tmp_path, monkeypatch, args, what):
    """``ray job submit --working-dir .`` runs the entrypoint in an unpacked copy that Ray deletes with the job, and
    tells it so (its runtime env, in RAY_JOB_CONFIG_JSON_ENV_VAR): no run may keep its store or checkpoints there."""
    runtime_env = {"runtime_env": {"working_dir": "gcs://_ray_pkg_0123.zip"}, "metadata": {}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(runtime_env))
    (tmp_path / "job").mkdir()
    monkeypatch.chdir(tmp_path / "job")
    if args:
        args = [args[0], args[1].replace("HEAD", str(tmp_path / "head")), "--set", "checkpoint.dir=raysim-runs/ckpt"]
    result = CliRunner().invoke(main, ["run", "fedvpt", *args])
    assert result.exit_code == 2, result.output
    lines = own_lines(result.stderr)
    assert len(lines) == 1 and f"this Ray job would write {what} in its working directory" in lines[0], lines
    assert "--tracking-uri" in lines[0] and "checkpoint.dir=" in lines[0]
    assert not (tmp_path / "job" / "raysim-runs").exists() and not (tmp_path / "head").exists()

    from raysim.config import build_config
    from raysim.engine.driver import checked

    outside = {"tracking_uri": f"sqlite:///{tmp_path}/head/mlflow.db"}
    checked(build_config("fedvpt", [{"tracking": outside, "checkpoint": {"dir": str(tmp_path / "ckpt")}}]))
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": {}, "metadata": {}}))
    checked(build_config("fedvpt", []))  # a job without --working-dir runs where it was started, which stays


def test_a_path_round_a_loop_of_links_is_one_line_and_leaves_no_run(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for given in (["--set", f"checkpoint.dir={tmp_path / 'a' / 'x'}"], ["--weights", str(tmp_path / "a" / "w")]):
        args = ["run", "fedvpt", "--backend", "sequential", *given, "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output + result.stderr
        (line,) = own_lines(result.stderr)
        assert line.startswith("raysim: error: ")
        assert "a loop of symbolic links" in line or "Too many levels of symbolic links" in line  # Python 3.11 or 3.13
        assert not (tmp_path / "m.db").exists()
