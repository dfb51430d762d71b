"""``raysim compare``'s report against hand-computed values (its statistics: test_statistics.py): the paired
table over cells logged to a real MLflow store (the fairness metrics paired where clients have types; the
group-selection diagnostics of the methods that log them, and paired with the first of those), and the same figures
as the comparison run's metrics."""

from __future__ import annotations

import math
import statistics

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from raysim.tracking.comparison import (
    CELL,
    GIT_COMMIT,
    GIT_DIRTY,
    NAME,
    TUNING,
    TUNING_SEED,
    VARIANT,
    Arranged,
    _code_line,
    comparison_metrics,
    metric_segments,
    tuning_seeds,
    write_arranged,
    write_comparison,
)
from raysim.tracking.mlflow import summary_metrics

T_975_2DF = 4.302652729911275  # the 97.5% quantile of Student's t with 2 degrees of freedom (tables)
T_975_1DF = 12.706204736174703  # ... with 1 degree of freedom


def _log_cells(
    uri: str,
    experiment: str,
    figures: dict[str, dict[str, list[float]]],
    plain: dict | None = None,
    tags: dict | None = None,
) -> None:
    """One FINISHED cell per method and seed, as ``raysim compare`` tags and summarises them; ``plain``: metrics
    logged as they are (not summaries), per method; ``tags``: more tags on every cell."""
    client = MlflowClient(uri)
    experiment_id = client.create_experiment(experiment)
    for method, metrics in figures.items():
        for seed in range(3):
            own = {NAME: experiment, CELL: f"{method}/s{seed}", VARIANT: method, "method": method, "seed": str(seed)}
            own.update(tags or {})
            run_id = client.create_run(experiment_id, run_name=f"{method}/s{seed}", tags=own).info.run_id
            summary = summary_metrics({key: {"mean": values[seed]} for key, values in metrics.items()})
            logged = {"global_acc": metrics["global_acc"][seed], "bytes_up": 10.0, "bytes_down": 10.0}
            logged.update({key: values[seed] for key, values in (plain or {}).get(method, {}).items()})
            client.log_batch(run_id, [Metric(k, v, 0, 1) for k, v in {**summary, **logged}.items()])
            client.set_terminated(run_id)


def test_the_report_pairs_the_fairness_metrics_where_clients_have_types(tmp_path, tracking_uri):
    uri = tracking_uri
    base = {"global_acc": [50.0, 60.0, 70.0], "local_acc": [50.0, 60.0, 70.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    _log_cells(
        uri,
        "typed",
        {
            "fedgcr": {**base, "sigma_type": [10.0, 12.0, 14.0], "sigma_client": [5.0, 5.0, 5.0]},
            "fedvpt": {**base, "sigma_type": [8.0, 9.0, 13.0], "sigma_client": [6.0, 7.0, 8.0]},  # -2, -3, -1; 1, 2, 3
        },
    )
    write_comparison(uri, "typed", tmp_path / "report", order=["fedgcr", "fedvpt"])
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| method - fedgcr |"))
    assert "sigma_type (last-10 mean; lower is fairer)" in header and "sigma_client (last-10 mean" in header
    row = [cell.strip() for cell in lines[lines.index(header) + 2].strip("|").split("|")]
    half = T_975_2DF / math.sqrt(3)  # both differences have sd 1
    assert row[0] == "fedvpt" and row[4] == f"-2.00 ± {half:.2f} (3/3 seeds agree)"
    assert row[5] == f"2.00 ± {half:.2f} (3/3 seeds agree)"  # |mean| < half: no "CI excludes 0"
    assert row[1] == "0.00 ± 0.00 (0/3 seeds agree)"  # equal accuracies: no seed on either side


def test_the_reports_figures_are_metrics_named_by_method_and_paired_with_the_first(tracking_uri):
    accuracy = {"global_acc": [50.0, 60.0, 70.0], "worst_local_acc": [0.0, 3.0, 6.0]}
    _log_cells(
        tracking_uri,
        "metrics",
        {"sgpt:head_pooling=cls": accuracy, "fedvpt": {"global_acc": [52.0, 63.0, 71.0], "worst_local_acc": [1, 1, 1]}},
    )
    figures = comparison_metrics(Arranged(tracking_uri, "metrics", order=["sgpt:head_pooling=cls", "fedvpt"]))
    half = T_975_2DF / math.sqrt(3)  # sd 10 over 3 seeds for sgpt's accuracy; sd 1 for the differences 2, 3, 1
    assert figures["sgpt_head_pooling_cls/global_acc_mean"] == 60.0  # '=' and ':' are no metric name's
    assert figures["sgpt_head_pooling_cls/global_acc_mean_ci95"] == pytest.approx(10 * half)
    assert figures["fedvpt/global_acc_mean"] == pytest.approx(62.0)
    assert figures["fedvpt/global_acc_mean_vs_sgpt_head_pooling_cls"] == pytest.approx(2.0)
    assert figures["fedvpt/global_acc_mean_vs_sgpt_head_pooling_cls_ci95"] == pytest.approx(half)
    assert figures["fedvpt/worst_local_acc_mean_vs_sgpt_head_pooling_cls"] == pytest.approx(-2.0)  # 1, -2, -5
    assert figures["fedvpt/bytes_per_round_mean"] == 20.0 and "fedvpt/bytes_per_round_mean_ci95" in figures
    assert not [name for name in figures if name.startswith("sgpt_head_pooling_cls/") and "_vs_" in name]
    assert not [name for name in figures if "local_acc_mean" in name and "worst" not in name]  # never logged


def test_metric_names_replace_what_mlflow_refuses_and_stay_apart():
    named = metric_segments(["sgpt:head_pooling=cls", "fedvpt:systems.speed=lognormal:3,0.5", "a:b=c", "a:b_c"])
    assert named["sgpt:head_pooling=cls"] == "sgpt_head_pooling_cls"
    assert named["fedvpt:systems.speed=lognormal:3,0.5"] == "fedvpt_systems.speed_lognormal_3_0.5"
    assert (named["a:b=c"], named["a:b_c"]) == ("a_b_c_3", "a_b_c_4")  # one name each, by position


def test_the_report_pairs_sigma_type_only_where_clients_have_types(tmp_path, tracking_uri):
    uri = tracking_uri
    figures = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 1.0, 2.0]}
    figures["sigma_client"] = [4.0, 4.0, 4.0]  # every run logs it; sigma_type only with client types
    _log_cells(uri, "untyped", {"a": figures, "b": {k: [v + 1 for v in vs] for k, vs in figures.items()}})
    write_comparison(uri, "untyped", tmp_path / "report", order=["a", "b"])
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| method - a |"))
    assert "sigma_type" not in header and header.endswith("| sigma_client (last-10 mean; lower is fairer) |")
    assert lines[lines.index(header) + 2].endswith("| 1.00 ± 0.00 (3/3 seeds agree; CI excludes 0) |")


def test_the_report_tabulates_the_selection_diagnostics_of_the_methods_that_log_them(tmp_path, tracking_uri):
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    accuracy["sigma_client"] = [1.0, 1.0, 1.0]  # every run logs it (the fairness plot's x)
    selection = {
        "cluster_top_share": [0.2, 0.3, 0.4],  # a share: the table gives percent, 30 ± t * 10 / sqrt(3)
        "cluster_groups_used": [10.0, 9.0, 8.0],
        "kmeans_congruence": [50.0, 50.0, 50.0],
        "selection_instability": [0.01, 0.02, 0.03],
    }  # no cluster_acc (a dataset without coarse labels or domains): no column
    _log_cells(tracking_uri, "selection", {"fedvpt": accuracy, "sgpt": accuracy}, plain={"sgpt": selection})
    write_comparison(tracking_uri, "selection", tmp_path / "report", order=["fedvpt", "sgpt"])
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| method | rows in the largest group"))
    assert "clustering accuracy" not in header and header.endswith("| selection instability |")
    rows = lines[lines.index(header) + 2 :]
    half = T_975_2DF / math.sqrt(3)
    shares, instability = f"30.00 ± {10 * half:.2f}", f"0.020 ± {0.01 * half:.3f}"
    assert rows == [f"| sgpt | {shares} | 9.00 ± {half:.2f} | 50.00 ± 0.00 | {instability} |"]
    assert "instability: the standard deviation" in lines[lines.index(header) - 2]


def test_the_report_pairs_the_selection_diagnostics_with_the_first_method_that_logs_them(tmp_path, tracking_uri):
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    accuracy["sigma_client"] = [1.0, 1.0, 1.0]
    sgpt = {"cluster_top_share": [0.2, 0.3, 0.4], "cluster_groups_used": [10.0, 9.0, 8.0]}  # no instability logged
    plain = {"cluster_top_share": [1.0, 1.0, 1.0], "cluster_groups_used": [1.0, 1.0, 1.0]}
    plain["selection_instability"] = [0.0, 0.0, 0.0]
    methods = {"fedvpt": accuracy, "sgpt": accuracy, "sgpt:key_rule=plain": accuracy}
    _log_cells(tracking_uri, "pairs", methods, plain={"sgpt": sgpt, "sgpt:key_rule=plain": plain})
    write_comparison(tracking_uri, "pairs", tmp_path / "report", order=["fedvpt", "sgpt", "sgpt:key_rule=plain"])
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| method - sgpt |"))  # fedvpt selects nothing
    assert header.endswith("| groups holding >= 1% of rows | selection instability |")
    assert lines[lines.index(header) - 2] == "Paired with sgpt (over the seeds both logged):"
    half = T_975_2DF / math.sqrt(3)  # differences 80, 70, 60 (percent) and -9, -8, -7: sd 10 and 1
    assert lines[lines.index(header) + 2 :] == [
        f"| sgpt:key_rule=plain | 70.00 ± {10 * half:.2f} (3/3 seeds agree; CI excludes 0) | "
        f"-8.00 ± {half:.2f} (3/3 seeds agree; CI excludes 0) |  |"  # no seed logged instability for both
    ]


def test_the_report_has_no_selection_table_without_group_prompt_methods(tmp_path, tracking_uri):
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    accuracy["sigma_client"] = [1.0, 1.0, 1.0]  # every run logs it (the fairness plot's x)
    _log_cells(tracking_uri, "plain", {"fedvpt": accuracy, "fedavg": accuracy})
    write_comparison(tracking_uri, "plain", tmp_path / "report", order=["fedvpt", "fedavg"])
    assert "Group selection" not in (tmp_path / "report" / "report.md").read_text()


def test_a_seed_without_a_number_is_left_out_of_its_interval_and_the_cell_says_over_how_many(tmp_path, tracking_uri):
    """A diagnostic with nothing to rest on (instability after one evaluation) is NaN: the other seeds still give
    the mean and the CI, and the cell names their number."""
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    accuracy["sigma_client"] = [1.0, 1.0, 1.0]
    sgpt = {"cluster_top_share": [0.2, 0.3, 0.4], "selection_instability": [math.nan, 0.02, 0.03]}
    plain = {"cluster_top_share": [1.0, 1.0, 1.0], "selection_instability": [0.0, 0.0, 0.0]}
    methods = {"sgpt": accuracy, "sgpt:key_rule=plain": accuracy}
    _log_cells(tracking_uri, "nan", methods, plain={"sgpt": sgpt, "sgpt:key_rule=plain": plain})
    write_comparison(tracking_uri, "nan", tmp_path / "report", order=["sgpt", "sgpt:key_rule=plain"])
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    means = lines[lines.index(next(line for line in lines if line.startswith("| method | rows in"))) + 2]
    assert means.endswith(f"| 0.025 ± {T_975_1DF * 0.005:.3f} (n=2) |")  # 0.02, 0.03: sd 0.01 / sqrt(2)
    pairs = lines[lines.index(next(line for line in lines if line.startswith("| method - sgpt | rows in"))) + 2]
    assert pairs.endswith(f"| -0.025 ± {T_975_1DF * 0.005:.3f} (2/2 seeds agree) |")  # over the seeds both have


def test_the_comparisons_own_report_keeps_only_the_cells_it_asked_for(tmp_path, tracking_uri):
    """An experiment may hold cells an earlier command added (another arm, more seeds): ``raysim compare``'s report
    rests on its own methods and seeds, ``raysim report`` on all of them."""
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    _log_cells(tracking_uri, "kept", {"a": accuracy, "b": accuracy, "c": accuracy})
    asked = {(method, seed) for method in ("a", "c") for seed in (0, 1)}
    arranged = Arranged(tracking_uri, "kept", ["a", "c"], asked)
    assert arranged.methods == ["a", "c"] and [arranged.seeds(m) for m in arranged.methods] == [2, 2]
    assert arranged.values("c", ("global_acc", "mean")) == {0: 1.0, 1: 2.0}
    assert Arranged(tracking_uri, "kept", ["a", "c"]).methods == ["a", "c", "b"]


def test_tuned_cells_are_paired_again_without_the_seed_they_were_tuned_on(tmp_path, tracking_uri):
    """The tuning ranks its trials on the tuning seed's evaluation, which flatters the winner there: the report pairs
    the methods again over the other seeds (here b - a: 10, 1, 3; without seed 0: 1, 3). These cells name the seed
    only in their tuning text, as cells logged before the tuning-seed tag do."""
    tuning = "4 raysim tune trials per method (its tune_spaces/ space, FIFO, this setting) on seed 0, ranked by ..."
    a = {"global_acc": [50.0, 60.0, 70.0], "local_acc": [50.0, 60.0, 70.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    b = {**a, "global_acc": [60.0, 61.0, 73.0]}
    _log_cells(tracking_uri, "tuned", {"a": a, "b": b}, tags={TUNING: tuning})
    write_comparison(tracking_uri, "tuned", tmp_path / "report", order=["a", "b"])
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    assert "## Paired with a without the tuning seed (all but seed 0)" in lines
    heads = [i for i, line in enumerate(lines) if line.startswith("| method - a |")]
    every, held_out = ([c.strip() for c in lines[i + 2].strip("|").split("|")] for i in heads)
    assert every[1] == f"4.67 ± {T_975_2DF * statistics.stdev([10, 1, 3]) / math.sqrt(3):.2f} (3/3 seeds agree)"
    assert held_out[1] == f"2.00 ± {T_975_1DF:.2f} (2/2 seeds agree)"  # sd sqrt(2), over sqrt(2) seeds


def test_the_tuning_seed_tag_names_the_seeds_left_out_and_two_must_remain(tmp_path, tracking_uri):
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    _log_cells(tracking_uri, "tagged", {"a": accuracy, "b": accuracy}, tags={TUNING: "...", TUNING_SEED: "1"})
    write_comparison(tracking_uri, "tagged", tmp_path / "report", order=["a", "b"])
    assert "without the tuning seed (all but seed 1)" in (tmp_path / "report" / "report.md").read_text()
    arranged = Arranged(tracking_uri, "tagged", ["a", "b"], {(m, s) for m in "ab" for s in (0, 1)})
    assert tuning_seeds(arranged.runs) == {1}
    write_arranged(arranged, tmp_path / "two")  # seeds 0 and 1, one left without the tuning seed: nothing to pair
    assert "without the tuning seed" not in (tmp_path / "two" / "report.md").read_text()


def test_cells_at_the_presets_have_no_tuning_seed(tmp_path, tracking_uri):
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    _log_cells(tracking_uri, "presets", {"a": accuracy, "b": accuracy})
    write_comparison(tracking_uri, "presets", tmp_path / "report", order=["a", "b"])
    assert "without the tuning seed" not in (tmp_path / "report" / "report.md").read_text()
    assert tuning_seeds([{"tags": {TUNING: "presets (no tuning)"}}]) == set()


def test_a_personalised_methods_generic_accuracy_has_a_column_blank_for_the_others(tmp_path, tracking_uri):
    accuracy = {"global_acc": [50.0, 60.0, 70.0], "local_acc": [50.0, 60.0, 70.0], "worst_local_acc": [0.0] * 3}
    _log_cells(tracking_uri, "personal", {"fedavg": accuracy, "ditto": {**accuracy, "generic_acc": [40.0, 41.0, 45.0]}})
    table, _ = write_comparison(tracking_uri, "personal", tmp_path / "report", order=["fedavg", "ditto"])
    header, _, fedavg, ditto = table.splitlines()
    column = [cell.strip() for cell in header.strip("|").split("|")].index("generic_acc (last-10 mean)")
    half = T_975_2DF * statistics.stdev([40.0, 41.0, 45.0]) / math.sqrt(3)
    assert [cell.strip() for cell in ditto.strip("|").split("|")][column] == f"42.00 ± {half:.2f}"
    assert [cell.strip() for cell in fedavg.strip("|").split("|")][column] == ""


def test_a_figure_no_method_logged_both_axes_of_is_left_out(tmp_path, tracking_uri):
    """Cells without a sigma (clients without types or local evaluation) draw no accuracy-vs-fairness axes."""
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    _log_cells(tracking_uri, "untyped", {"a": accuracy, "b": accuracy})
    _, paths = write_comparison(tracking_uri, "untyped", tmp_path / "report", order=["a", "b"])
    assert [p.name for p in paths] == ["report.md", "accuracy_vs_bytes.png"]
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["accuracy_vs_bytes.png", "report.md"]


def test_the_report_names_the_commits_its_cells_ran_at(tmp_path, tracking_uri):
    """A comparison resumed after the checkout moved on ran its cells at several commits: the report says which."""
    accuracy = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 0.0, 0.0]}
    commit = {GIT_COMMIT: "63596b4a3812" + "0" * 28, GIT_DIRTY: "false"}
    _log_cells(tracking_uri, "one", {"a": accuracy, "b": accuracy}, tags=commit)
    write_comparison(tracking_uri, "one", tmp_path / "one", order=["a", "b"])
    assert "- code: 63596b4\n" in (tmp_path / "one" / "report.md").read_text()
    later = {GIT_COMMIT: "d50110b8e73b" + "0" * 28, GIT_DIRTY: "true"}
    [line] = _code_line([{"tags": commit}, {"tags": later}, {"tags": commit}])
    assert line.startswith("- code: 63596b4, d50110b+dirty (the cells ran at different commits")
    assert _code_line([{"tags": {}}]) == []  # no checkout (an installed package): no line


def test_the_report_names_every_cpu_its_cells_ran_on(tmp_path, tracking_uri):
    figures = {"global_acc": [1.0, 2.0, 3.0], "local_acc": [1.0, 2.0, 3.0], "worst_local_acc": [0.0, 1.0, 2.0]}
    _log_cells(tracking_uri, "mixed", {"a": figures, "b": figures}, tags={"hardware.cpu": "AMD EPYC (2 CPUs)"})
    write_comparison(tracking_uri, "mixed", tmp_path / "one", order=["a", "b"])
    assert "- CPU: AMD EPYC (2 CPUs); GPU: none; precision:" in (tmp_path / "one" / "report.md").read_text()
    client = MlflowClient(tracking_uri)
    for run in client.search_runs([client.get_experiment_by_name("mixed").experiment_id], "tags.method = 'b'"):
        client.set_tag(run.info.run_id, "hardware.cpu", "Intel Xeon (2 CPUs)")  # b's cells resumed elsewhere
    write_comparison(tracking_uri, "mixed", tmp_path / "two", order=["a", "b"])
    line = next(line for line in (tmp_path / "two" / "report.md").read_text().splitlines() if "CPU:" in line)
    assert line.startswith("- CPU: AMD EPYC (2 CPUs) / Intel Xeon (2 CPUs); GPU: none (the cells ran on different")
