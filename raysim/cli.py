"""``raysim`` command line: ``raysim run METHOD``, ``tune``, ``compare``, ``report``, ``ui``, ``pretrain``, ``ls``,
``data fetch``.

Bad input ends in one line on stderr (``raysim: error: ...``) and exit code 2, never a traceback.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from dataclasses import fields
from functools import partial

import click

from raysim.attacks.cli import attack
from raysim.base.command_group import CommandGroup, given_on_command_line
from raysim.base.errors import BadUpdateError, ConfigError, RunInterrupted, SimulationLost, SweepError, Terminated
from raysim.base.paths import unwritable
from raysim.base.settings import NAME_CHARACTERS, default_of
from raysim.base.sole_runner import run_lock, sole_runner
from raysim.base.stop_signals import take_sigterm
from raysim.config import (
    TrackingConfig,
    build_config,
    check_runnable,
    load_preset,
    other_method_note,
    own_setting,
    parse_override,
    preset_for_method,
    preset_method,
    presets,
    setting_note,
)
from raysim.config.listing import option_names, options_text
from raysim.config.partition_keys import refuse_unread_partition_keys
from raysim.config.pretrain_recipe import PretrainRecipe
from raysim.config.sections import SECTIONS, flagged_fields
from raysim.core.registry import FAMILIES, METHODS
from raysim.data.partition import PARTITIONERS
from raysim.data.sources import SOURCES

NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click 8.2+ raises it for a bare group
RUN_ONLY = ("run_name",)  # flags that name one run; a sweep names its trials itself


class OneLineErrors(CommandGroup):
    """Turns usage errors and :class:`ConfigError` into one line and exit code 2."""

    group_class = CommandGroup

    def main(self, *args, **kwargs):
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as done:
            sys.exit(done.exit_code)
        except (click.exceptions.Abort, KeyboardInterrupt) as error:  # click turns a KeyboardInterrupt into Abort
            if isinstance(error, Terminated) or isinstance(error.__cause__, Terminated):
                leave("raysim: terminated (SIGTERM)", signal.SIGTERM)
            leave("raysim: interrupted")
        except NO_ARGS_IS_HELP as asked:  # `raysim`, `raysim data`: the help, as click printed it before 8.2
            click.echo(asked.ctx.get_help())
            sys.exit(0)
        except click.UsageError as error:
            argv = kwargs.get("args") or (args[0] if args else None) or sys.argv[1:]
            named = subcommands(error.ctx) if error.ctx is not None else commands_in(self, list(argv))
            hint = f" (see '{' '.join(['raysim', *named])} --help')"
            fail(error.format_message().replace("\n", " ") + hint)
        except ConfigError as error:  # raised in a Ray task it arrives wrapped; ``cause`` is the original
            fail(str(getattr(error, "cause", None) or error))
        except (
            BadUpdateError,
            SimulationLost,
            SweepError,
        ) as error:  # on the Ray backend it arrives wrapped; ``cause`` is the original
            click.echo(f"raysim: error: {getattr(error, 'cause', None) or error}", err=True)
            sys.exit(1)
        except RunInterrupted as stopped:
            leave(f"raysim: {stopped}", stopped.signum, at_once=stopped.ray_lost)
        except OSError as error:  # a path given that no file system takes: a name too long, a loop of links
            if error.errno not in (errno.ENAMETOOLONG, errno.ELOOP):
                raise
            fail(f"{error.filename or 'a path given'}: {error.strerror}; give another path")
        except RuntimeError as error:  # pathlib's resolve() on a loop of symbolic links (Python 3.11-3.12)
            if not str(error).startswith("Symlink loop from"):
                raise
            fail(f"{error}: a path given goes round a loop of symbolic links; give another path")


def subcommands(ctx: click.Context | None) -> list[str]:
    """The subcommands ``ctx`` ran, outermost first (``["data", "fetch"]``), whatever the program was called."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return names[::-1]


def commands_in(group: click.Group, argv: list[str]) -> list[str]:
    """The subcommands ``argv`` names, outermost first: for an error click raised before it made their context (an
    option's missing value)."""
    names = []
    for token in argv:
        if not isinstance(group, click.Group) or token not in group.commands:
            break
        names.append(token)
        group = group.commands[token]
    return names


def leave(message: str, signum: int = signal.SIGINT, at_once: bool = False) -> None:
    """Exit 128 + ``signum`` (130 after Ctrl-C, 143 after SIGTERM); a further Ctrl-C no longer interrupts the short
    teardown (Ray's own shutdown), and a further SIGTERM ends the process at once. ``at_once``: without the teardown
    (Ray's processes are gone, and its shutdown would wait a minute for them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    click.echo(message, err=True)
    if at_once:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)
    sys.exit(128 + signum)


def not_empty(option: str, value: str | None) -> str | None:
    """``value``, refused where it is empty (a shell variable that was not set): it would mean the default."""
    if value is not None and not value.strip():
        raise click.BadParameter(f"{option} '' is empty; give a value or leave {option} out")
    return value


def plain_name(option: str, value: str | None) -> str | None:
    """``value``, refused where it is empty or a path: it names a folder of its own under the store's."""
    value = not_empty(option, value)
    if value is not None and ("/" in value or "\\" in value or value in (".", "..")):
        raise click.BadParameter(f"{option} '{value}' is a path; give a plain name, e.g. {option} my-sweep")
    if value is not None and len(value) > NAME_CHARACTERS:
        raise click.BadParameter(
            f"{option} is {len(value)} characters long; a folder's name takes at most {NAME_CHARACTERS}"
        )
    return value


def fail(message: str) -> None:
    click.echo(f"raysim: error: {message}", err=True)
    sys.exit(2)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="raysim")
def main():
    """raysim: federated learning with pretrained vision transformers, simulated on Ray.

    \b
    raysim run sgpt --clients 100        run a method on the offline default
    raysim ui                            compare the runs in MLflow's UI
    raysim ls                            list methods, datasets, partitions, backbones, presets
    """


def _flag_option(section: str, spec, default_text: str | None = None):
    """The click option of one config key, from its field metadata (one declaration per key); ``default_text``: what
    the command takes where the flag is not given, in place of the key's default."""
    meta, default = spec.metadata, default_text or default_of(spec)
    hint = f" ({section}.{spec.name})" if default is None else f" ({section}.{spec.name}; default {default})"
    if isinstance(spec.default, bool):
        return click.option(meta["flag"], spec.name, is_flag=True, default=None, help=meta["help"] + hint)
    kind = click.Choice(meta["choices"]) if meta["choices"] else {int: int, float: float}.get(type(spec.default), str)
    return click.option(meta["flag"], spec.name, type=kind, help=meta["help"] + hint)


def complete_methods(ctx, param, incomplete: str) -> list[str]:
    """The registered methods a shell completes METHOD to (``_RAYSIM_COMPLETE=bash_source raysim``)."""
    return [name for name in METHODS if name.startswith(incomplete)]


def complete_presets(ctx, param, incomplete: str) -> list:
    """The presets a shell completes --preset to, and the files (a preset may be a YAML file)."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(name) for name in presets() if name.startswith(incomplete)] + [
        CompletionItem(incomplete, type="file")
    ]


FLAGS = {spec.name: (section, spec) for section, cls in SECTIONS.items() for spec in flagged_fields(cls)}
SHARED_OPTIONS = [
    click.option(
        "--preset",
        "preset",
        callback=lambda _, __, value: not_empty("--preset", value),
        shell_complete=complete_presets,
        help="A preset name (raysim ls presets) or a YAML file.",
    ),
    click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override any config key or method option, e.g. --set train.lr=0.05 --set fedprox.mu=0.1 (repeatable; "
        "a method's options: raysim ls options METHOD).",
    ),
]


def config_options(run_only: bool = False, defaults: dict[str, str] | None = None):
    """The options that set config keys (generated from the config sections' fields), shared by ``run``, ``tune``
    and ``compare``; ``run_only`` adds the ones that name a single run; ``defaults``: a key's default where the
    command picks its own (a sweep's experiment is its name)."""

    def decorate(command):
        flags = [
            _flag_option(section, spec, (defaults or {}).get(name))
            for name, (section, spec) in FLAGS.items()
            if run_only or name not in RUN_ONLY
        ]
        for option in reversed([*flags, *SHARED_OPTIONS]):
            command = option(command)
        return command

    return decorate


def flag_layers(overrides, flags) -> list[dict]:
    """The CLI flags, then each --set, as config layers."""
    layer: dict = {}
    for name, value in flags.items():
        if value is not None and name in FLAGS:
            layer.setdefault(FLAGS[name][0], {})[name] = value
    layers = [layer]
    for text in overrides:
        section, key, value = parse_override(text)
        layers.append({section: {key: value}})
    return layers


def driver_and_data(config):
    """A new run's driver and data, prepared while Ray starts on the calling thread: importing the driver (torch,
    MLflow, matplotlib) takes seconds, as does starting a local Ray's daemons (docs/performance.md). The store is
    checked before the data are read."""
    from raysim.engine.driver import checked, run
    from raysim.engine.setup import prepare_shards

    checked(config)
    return run, prepare_shards(config)


@main.command(context_settings={"max_content_width": 100})
@click.argument("method", required=False, shell_complete=complete_methods)
@click.option(
    "--resume",
    metavar="RUN_ID_OR_DIR",
    help="Continue a stopped run from its newest checkpoint "
    "(a run id, or a checkpoint folder); only --rounds and the resource flags may change.",
)
@config_options(run_only=True)
@click.option(
    "--progress/--no-progress",
    default=True,
    help="Show the header and each round's progress on stderr (--no-progress: the results on stdout alone).",
)
def run(method, resume, preset, overrides, progress, **flags):
    """Run METHOD (raysim ls methods) as one federated simulation, tracked in MLflow.

    Settings come from defaults < --preset < flags < --set; METHOD's own options, with their defaults and help:
    raysim ls options METHOD (set one as it names it, e.g. --set sgpt.groups=5). The resolved config is printed,
    saved with the run, and the final table reports the last 10 evaluated rounds (the papers' protocol). A
    checkpoint is written after every round; the first Ctrl-C (or SIGTERM) finishes the round and prints the
    --resume command.
    """
    if method is None and resume is None:
        method = preset_method(preset)  # a run's saved config.yaml names its method
        if method is None:
            raise click.UsageError(
                "Missing argument 'METHOD' (raysim ls methods), --preset FILE that names one, or --resume RUN_ID_OR_DIR"
            )
    take_sigterm()  # a scheduler's stop is a clean one: as Ctrl-C, exit 143
    if resume is not None and preset:
        raise ConfigError("--preset cannot change a resumed run (it continues its saved config); drop --preset")
    given = flag_layers(overrides, flags)
    setting = own_setting([method], preset, given) if resume is None else None
    layers = ([preset_for_method(load_preset(preset or setting), method)] if preset or setting else []) + given
    if resume is None:
        config = build_config(method, layers)  # a typo stops here, before Ray is imported
        check_runnable(config)
        refuse_unread_partition_keys(given, config.data.partition)
        if setting:
            click.echo(f"raysim: {setting_note([method], setting)}", err=True)
        if note := other_method_note(preset, [method]):
            click.echo(f"raysim: {note}", err=True)
        from raysim.engine.ray_connect import connect_ray_during  # imports Ray, not torch or MLflow

        run_simulation, shards = connect_ray_during(config.resources, partial(driver_and_data, config))
        run_simulation(config, show_progress=progress, shards=shards)
        return

    from raysim.engine.driver import run as run_simulation  # imports Ray and MLflow (torch: a sequential run's rounds)
    from raysim.tracking import resume as resuming

    found = resuming.find(resume, flags["tracking_uri"])  # the store only helps find the run; it cannot change
    named_store = flags["tracking_uri"] and TrackingConfig(tracking_uri=flags["tracking_uri"]).resolved_uri
    if named_store and named_store != found.tracking_uri:
        raise ConfigError(
            f"--tracking-uri {named_store} is not the store of run {found.run_id} ({found.tracking_uri}); a resumed "
            "run logs to its own store: drop --tracking-uri"
        )
    tracked = [f"tracking.{key}" for layer in layers for key in layer.get("tracking", {}) if key != "tracking_uri"]
    if tracked:
        raise ConfigError(f"{tracked[0]} cannot change when resuming (the run keeps its experiment and name); drop it")
    layers = [{section: values for section, values in layer.items() if section != "tracking"} for layer in layers]
    config, run_folder = resuming.resumed_config(found, method, layers), found.folder.parent
    with run_lock(run_folder, found.run_id):
        run_simulation(config, show_progress=progress, resume=found)


@main.command(context_settings={"max_content_width": 100})
@click.argument("method", required=False, shell_complete=complete_methods)
@click.option("--space", help="Search-space YAML (default: tune_spaces/METHOD.yaml shipped with raysim).")
@click.option("--num-samples", type=int, default=4, show_default=True, help="Trials (times each grid point).")
@click.option("--max-concurrent", type=int, help="Trials at once (default: as many as the cluster hosts).")
@click.option("--metric", default="global_acc", show_default=True, help="Per-round metric to optimise.")
@click.option("--mode", default="max", show_default=True, help="max or min.")
@click.option("--scheduler", default="asha", show_default=True, help="asha (stops bad trials early) or fifo.")
@click.option(
    "--name",
    callback=lambda _, __, value: plain_name("--name", value),
    help="Sweep name: its MLflow experiment and folder (default METHOD-DATE-TIME).",
)
@click.option("--resume", metavar="SWEEP_DIR", help="Finish an interrupted sweep (the folder printed at its start).")
@config_options(defaults={"experiment": "the sweep's --name"})
def tune(method, space, num_samples, max_concurrent, metric, mode, scheduler, name, resume, preset, overrides, **flags):
    """Sweep METHOD's hyperparameters with Ray Tune: every trial is a whole simulation and an MLflow run.

    Trial configs: defaults < --preset < the space's fixed values < flags and --set < the sampled values. At
    the end the best trial's config is saved as a preset and printed as a ready-to-run command.
    """
    from raysim.sweep import tune as sweeping  # imports Ray, Tune and MLflow: only when a sweep starts

    take_sigterm()  # a scheduler's stop is a clean one: as Ctrl-C, exit 143
    if resume is not None:
        planned = ("space", "num_samples", "max_concurrent", "metric", "mode", "scheduler", "name")
        given = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None] + (
            ["--preset"] if preset else []
        )
        given += given_on_command_line(planned)
        if method or given or overrides:
            raise ConfigError(f"--resume finishes the sweep as it was planned; drop {(given or ['METHOD'])[0]}")
        found, folder = sweeping.load_sweep(resume)
        with sweeping.sole_sweep_runner(found, folder):  # a sweep still running is named, never abandoned
            sweeping.refuse_unsaved(found, folder)
            sweeping.check_store_and_ray(found)
            click.echo(f"resuming sweep {found.name} in {folder}", err=True)
            report_best(found, sweeping.execute(found, folder, str(folder)))
        return
    method = method or preset_method(preset)  # a run's saved config.yaml names its method
    if method is None:
        raise click.UsageError(
            "Missing argument 'METHOD' (raysim ls methods), --preset FILE that names one, or --resume SWEEP_DIR"
        )
    found = sweeping.plan(
        method, space, num_samples, max_concurrent, metric, mode, scheduler, name, preset, flag_layers(overrides, flags)
    )
    if note := other_method_note(preset, [method]):
        click.echo(f"raysim: {note}", err=True)
    folder = sweeping.sweep_folder(found)
    with sweeping.sole_sweep_runner(found, folder, new=True):
        sweeping.refuse_taken(found.name, folder)  # another process may have started this name since the plan
        found = sweeping.open_parent(found)
        sweeping.save_sweep(found)
        experiment = found.trial_config({}).tracking.experiment
        click.echo(
            f"sweep {found.name}: {found.trials} trials, {found.max_concurrent} at once, MLflow experiment "
            f"{experiment!r} (run {found.parent_run_id}); resume with: raysim tune --resume {folder}",
            err=True,
        )
        report_best(found, sweeping.execute(found, folder))


@main.command(context_settings={"max_content_width": 100})
@click.argument("methods", nargs=-1, shell_complete=complete_methods)
@click.option("--seeds", type=int, default=3, show_default=True, help="Seeds per method: --seed, --seed + 1, ...")
@click.option(
    "--tune-budget", type=int, default=0, show_default=True, help="raysim tune trials per method first (0: presets)."
)
@click.option("--max-concurrent", type=int, help="Runs at once (default: as many as the cluster hosts).")
@config_options(defaults={"experiment": "compare-M1-M2-...-PRESET"})
def compare(methods, seeds, tune_budget, max_concurrent, preset, overrides, **flags):
    """Run METHODS on the same data for several seeds and report means with 95% CIs and paired differences.

    A method may carry settings of its own, METHOD:KEY=VALUE[:KEY=VALUE] (KEY: one of its options, or
    section.key), e.g. sgpt:head_pooling=cls or fedvpt:systems.speed=lognormal:3,0.5, as one row of an ablation.

    Every (method, seed) is an MLflow run in the comparison's experiment (--experiment; default
    compare-M1-M2-...-PRESET); the report (report.md, accuracy-vs-fairness and accuracy-vs-bytes plots) is logged to
    the comparison's own run and printed. The first method is the one the others are paired with. Running the same
    command again resumes: finished runs are kept.
    """
    from raysim.sweep import compare as comparing  # imports Ray, Tune and MLflow: only when a comparison starts

    take_sigterm()  # a scheduler's stop is a clean one: as Ctrl-C, exit 143
    given = flag_layers(overrides, flags)
    named = [arm.split(":", 1)[0] for arm in methods]
    if setting := own_setting(named, preset, given):
        click.echo(f"raysim: {setting_note(named, setting)}", err=True)
        preset = setting
    found = comparing.plan(tuple(methods), seeds, tune_budget, max_concurrent, preset, given)
    if note := other_method_note(preset, named):
        click.echo(f"raysim: {note}", err=True)
    what = f"comparison {found.name!r}"
    with sole_runner(found.folder, what, "run this command again to resume"):
        tuning = found.tuning(comparing.scoring(found))
        click.echo(
            f"comparison {found.name}: {len(found.methods)} methods x {len(found.seeds)} seeds, "
            f"{found.max_concurrent} run(s) at once, {tuning}; MLflow experiment {found.name!r}; to resume, "
            f"run the same command",
            err=True,
        )
        table, paths = comparing.execute(found)
    click.echo(table)
    click.echo(f"wrote {', '.join(str(p) for p in paths)}")


def report_best(found, best) -> None:
    """Print the best trial and the command that reproduces it."""
    from raysim.sweep.trial_progress import trial_name

    shown = {k: round(v, 6) if isinstance(v, float) else v for k, v in best["params"].items()}
    click.echo(
        f"best trial: {trial_name(best['metrics']['trial_id'])}, {found.metric} {best['metrics'][found.metric]:.4f} "
        f"(last-10 mean {best['score']:.4f}, which ranks) with {shown} "
        f"(MLflow run {best['run_id']}; {best['errors']} trial(s) failed)"
    )
    click.echo(f"reproduce it: {best['command']}")


@main.command()
@click.argument("experiment")
@click.option("--tracking-uri", help="MLflow store (default sqlite:///./raysim-runs/mlflow.db).")
@click.option("--out", help="Folder for report.md and the figures (default ./raysim-report-EXPERIMENT).")
def report(experiment, tracking_uri, out):
    """Compare the finished runs of EXPERIMENT per method: table, overlaid accuracy curves, global vs worst; for a
    raysim compare experiment, its report (means with 95% CIs over seeds, paired differences, Pareto plots)."""
    from raysim.tracking.comparison import is_comparison, write_comparison
    from raysim.tracking.mlflow import check_run_store  # imports MLflow: only when a report is asked for
    from raysim.tracking.report import write_report

    uri = TrackingConfig(tracking_uri=tracking_uri).resolved_uri
    check_run_store(uri)
    folder = out or f"raysim-report-{experiment}"
    blocked = unwritable(folder)
    if blocked is not None:
        raise ConfigError(f"--out {folder} is not writable (cannot create files in {blocked}); pass another --out")
    write = write_comparison if is_comparison(uri, experiment) else write_report
    table, paths = write(uri, experiment, folder)
    click.echo(table)
    click.echo(f"wrote {', '.join(str(p) for p in paths)}")


@main.command()
@click.option("--tracking-uri", help="MLflow store (default sqlite:///./raysim-runs/mlflow.db, as raysim run).")
@click.option("--experiment", default="raysim", show_default=True, help="The experiment whose runs the URL opens.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    callback=lambda _, __, value: not_empty("--host", value),
    help="Where the UI listens (127.0.0.1: this machine).",
)
@click.option("--port", type=click.IntRange(1, 65535), default=5000, show_default=True, help="The UI's port.")
def ui(tracking_uri, experiment, host, port):
    """Start MLflow's UI on the run store and print the URL of the runs table.

    The URL opens the experiment's runs in MLflow's classic view (table, charts, compare), not its GenAI pages.
    A store that is an MLflow server (an http:// tracking URI) is not started again: its URL is printed. Ctrl-C
    stops the UI.
    """
    from raysim.tracking.ui import serve  # imports MLflow: only when the UI is asked for

    code = serve(TrackingConfig(tracking_uri=tracking_uri).resolved_uri, experiment, host, port)
    if code:
        sys.exit(code)


def _recipe_options(command):
    """One ``--option`` per :class:`PretrainRecipe` field, with its default and help."""
    for spec in reversed(fields(PretrainRecipe)):
        choices = spec.metadata["choices"]
        kind = click.Choice(choices) if choices else type(spec.default)
        command = click.option(
            f"--{spec.name.replace('_', '-')}",
            spec.name,
            type=kind,
            default=spec.default,
            show_default=True,
            help=spec.metadata["help"],
        )(command)
    return command


@main.command()
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Where to write the safetensors file (a .json sidecar with SHA-256, recipe and command is written beside it).",
)
@_recipe_options
def pretrain(out, **recipe_fields):
    """Pretrain the offline backbone on glyphs of scripts no benchmark uses (the shipped weights' recipe)."""
    from rich.console import Console

    from raysim.base.precision import native_bf16_cpu
    from raysim.engine.pretrain import pretrain as run_pretrain

    if not out.endswith(".safetensors"):  # the sidecar is OUT with .json in place of the suffix
        raise ConfigError(f"--out {out} must end in .safetensors (the .json sidecar is written beside it)")
    recipe = PretrainRecipe(**recipe_fields)
    command = recipe.command(out)
    console = Console(stderr=True)
    if recipe.precision == "bf16" and not native_bf16_cpu():
        console.print(
            "raysim: warning: this CPU has no native bf16 (AVX-512 BF16 or AMX), so the bf16 recipe runs "
            "many times slower here; --precision fp32 is faster but writes a different file",
            highlight=False,
        )

    def report(epoch, epochs, loss):
        console.print(f"epoch {epoch}/{epochs}: train loss {loss:.3f}", highlight=False)

    sidecar = run_pretrain(recipe, out, command=command, report=report)
    click.echo(
        f"wrote {out} ({sidecar['bytes'] / 1e6:.1f} MB, sha256 {sidecar['sha256']}); held-out accuracy on "
        f"the pretraining corpus {sidecar['held_out_accuracy']:.1f}% after {sidecar['seconds']['total']:.0f} s"
    )


LISTS = ("methods", "datasets", "partitions", "backbones", "presets")


@main.command(name="ls")
@click.argument("what", required=False, type=click.Choice((*LISTS, "options")))
@click.argument("method", required=False, shell_complete=complete_methods)
@click.option("--names", is_flag=True, help="Only the names, one a line (for scripts: for m in $(raysim ls ...)).")
def ls(what, method, names):
    """List what raysim knows by name, with one line each (methods grouped by family); ls options METHOD: the
    method's options, each with its type, default, accepted values and help (set them with --set)."""
    if what == "options" and method is None:
        raise click.UsageError(f"raysim ls options METHOD lists a method's options; METHOD: {', '.join(METHODS)}")
    if what != "options" and method is not None:
        instead = f"raysim ls options {method} lists its options" if method in METHODS else "drop it"
        raise click.UsageError(f"raysim ls {what} takes no METHOD ({method!r}); {instead}")
    if what == "options":
        click.echo("\n".join(option_names(method)) if names else options_text(method))
        return
    if names:
        if what is None:
            raise click.UsageError("--names lists one kind: raysim ls methods --names")
        click.echo("\n".join(METHODS if what == "methods" else sorted(_listing(what))))
        return
    for kind in [what] if what else LISTS:
        click.echo(f"{kind}:")
        if kind == "methods":
            for family in FAMILIES:
                click.echo(f"  {family}:")
                for name, info in METHODS.items():
                    if info.family == family:
                        click.echo(f"    {name:<34} {info.description}")
            continue
        for name, text in sorted(_listing(kind).items()):
            click.echo(f"  {name:<36} {text}")


def _listing(kind: str) -> dict[str, str]:
    if kind == "datasets":
        return {name: s.description for name, s in SOURCES.items()}
    if kind == "partitions":
        return {name: p.description for name, p in PARTITIONERS.items()}
    if kind == "backbones":
        from raysim.models.backbones import BACKBONES  # imports timm

        return dict(BACKBONES.items())
    return presets()


@main.group(context_settings={"max_content_width": 100})
def data():
    """The papers' datasets in the data cache ($RAYSIM_CACHE, default ~/.cache/raysim).

    \b
    raysim data fetch cifar100           download, check and unpack a dataset's public archive
    """


@data.command(name="fetch")
@click.argument("name")
def data_fetch(name):
    """Download dataset NAME's public archive (cifar10, cifar100, tiny-imagenet) into the data cache's downloads/,
    check its SHA-256, unpack it there and print the folder; a run without --data-dir reads it from there (and
    fetches it itself the first time). An interrupted download resumes; $RAYSIM_DATA_MIRROR (a base URL) fetches
    from a mirror instead (docs/datasets.md)."""
    from raysim.data.fetch import fetch  # urllib and the archive formats: only for this command

    click.echo(fetch(name))


main.add_command(attack)

if __name__ == "__main__":
    main(prog_name="raysim")  # as the console script: its usage lines, and its shell completion (_RAYSIM_COMPLETE)
