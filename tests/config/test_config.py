import math
from dataclasses import fields
from importlib import resources

import pytest
import yaml

from raysim.base.errors import ConfigError
from raysim.config import (
    as_recorded,
    build_config,
    dump_yaml,
    load_preset,
    own_setting,
    parse_override,
    preset_for_method,
    presets,
    setting_note,
    yaml12,
)
from raysim.config.partition_keys import refuse_unread_partition_keys
from raysim.core.registry import METHODS
from raysim.data.partition import PARTITIONERS, PartitionParams


def test_defaults_are_valid_and_resolve_method_options():
    config = build_config("fedprox", [])
    assert config.federation.clients == 100
    assert config.options.mu == pytest.approx(0.01)
    assert config.flat()["fedprox.mu"] == pytest.approx(0.01)


def test_layers_merge_in_order_and_values_are_coerced():
    config = build_config(
        "fedprox",
        [
            {"federation": {"rounds": 5, "participation": 1}},
            {"federation": {"rounds": 7}, "fedprox": {"mu": 1}},
        ],
    )
    assert config.federation.rounds == 7
    assert isinstance(config.federation.participation, float) and config.federation.participation == 1.0
    assert isinstance(config.options.mu, float)


def test_parse_override_reads_yaml_values():
    assert parse_override("train.lr=0.05") == ("train", "lr", 0.05)
    assert parse_override("model.weights=null") == ("model", "weights", None)
    assert parse_override("data.dataset=digits") == ("data", "dataset", "digits")


def test_on_off_yes_no_are_words_and_only_true_false_are_booleans():
    """YAML 1.2's booleans: the docs' ``--set train.cohort=off`` is the word a choice field expects."""
    assert [parse_override(f"train.cohort={word}")[2] for word in ("off", "on", "yes", "no")] == [
        "off",
        "on",
        "yes",
        "no",
    ]
    layers = [{"train": dict([parse_override("train.cohort=off")[1:]])}, {"model": {"pretrained": False}}]
    assert build_config("fedvpt", layers).train.cohort == "off"
    assert parse_override("model.pretrained=false")[2] is False and parse_override("model.pretrained=True")[2] is True
    with pytest.raises(ConfigError, match="model.pretrained='no' has the wrong type; expected bool"):
        build_config("fedvpt", [{"model": {"pretrained": parse_override("model.pretrained=no")[2]}}])


def test_a_number_given_to_a_text_key_keeps_its_spelling_and_a_number_key_reads_it():
    layers = [
        {section: {key: value}}
        for section, key, value in map(
            parse_override, ["tracking.experiment=1.10", "train.lr=1e-4", "federation.participation=.50"]
        )
    ]
    config = build_config("fedvpt", layers)
    assert config.tracking.experiment == "1.10"
    assert config.train.lr == 1e-4 and config.federation.participation == 0.5


@pytest.mark.parametrize(
    "layers, fragment",
    [
        ([{"federation": {"participation": 0.0}}], "participation=0.0 must be in (0, 1]"),
        ([{"federation": {"participation": 1.5}}], "participation=1.5"),
        ([{"data": {"alpha": 0.0}}], "data.alpha=0.0 must be > 0"),
        ([{"data": {"alpha": float("inf")}}], "data.alpha=inf must be a finite number"),
        ([{"data": {"dif": parse_override("data.dif=1e400")[2]}}], "data.dif=inf must be a finite number"),
        ([{"train": {"lr": 1e38 * 10}}], "lr=1e+39 is beyond float32's range (3.4e38), in which the clients compute"),
        ([{"train": {"lr": float("nan")}}], "train.lr=nan must be a finite number"),
        (
            [{"privacy": {"mode": "user", "noise_multiplier": 1.0, "delta": 1e-3, "clip": 1e39}}],
            "privacy.clip=1e+39 is beyond float32's range (3.4e38), in which the clients compute",
        ),
        ([{"train": {"lr": 1e38}}], "train.lr=1e+38 overflows float32 in AdamW's first step (lr / (1 - 0.9) = 1e+39"),
        ([{"federation": {"seed": -1}}], "federation.seed=-1 must be >= 0"),
        ([{"tracking": {"experiment": " "}}], "tracking.experiment=  must not be empty"),
        ([{"data": {"dataset": "cifar1000"}}], "valid datasets: cifar10, cifar100, digit-five, digits,"),
        ([{"data": {"partition": "nope"}}], "valid partitions: dirichlet, domains, iid, pachinko, pathological"),
        ([{"federation": {"clients": 3}, "resources": {"workers": 4}}], "workers=4 is more than the 3 clients"),
        ([{"federation": {"colour": 1}}], "unknown key federation.colour; valid keys in federation:"),
        ([{"federation": {"rounds": "ten"}}], "federation.rounds='ten' has the wrong type; expected int"),
        ([{"train": {"lr": None}}], "train.lr is null; it takes float"),
        ([{"systems": {"tiers": [1, 2]}}], "systems.tiers=[1, 2] has the wrong type; expected str or null"),
        ([{"fgpt": {"k": 2}}], "unknown section 'fgpt' for method fedvpt"),
        ([{"fedvpt": {"prompt_length": 0}}], "prompt_length=0 must be at least 1"),
        ([{"federation": {"stragglers": "partial"}}], "federation.stragglers=partial is set but does nothing without"),
        (
            [{"model": {"weights": "/no/such/file.safetensors"}}],
            "weights file /no/such/file.safetensors does not exist",
        ),
        (
            [{"data": {"dataset": "digits", "data_dir": "/data/digit_five"}}],
            "data.data_dir=/data/digit_five is set but dataset 'digits' is built in and reads no files; drop",
        ),
    ],
)
def test_bad_values_give_one_line_errors(layers, fragment):
    with pytest.raises(ConfigError) as info:
        build_config("fedvpt", layers)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_yaml_merge_keys_load_and_a_key_given_twice_is_refused():
    merged = yaml12.load("base: &b {lr: 0.1, batch_size: 4}\ntrain: {<<: *b, lr: 0.2}\n")
    assert merged["train"] == {"lr": 0.2, "batch_size": 4}  # a key may override a merged one
    with pytest.raises(yaml.YAMLError, match="key 'lr' is given twice in one mapping"):
        yaml12.load("train: {lr: 0.1, lr: 0.2}\n")
    with pytest.raises(ConfigError, match=r"^override .*: key 'a' is given twice in one mapping; give each key once$"):
        parse_override("fedgcr.mix={a: 1, a: 2}")  # not the text itself, as a value YAML cannot read is


@pytest.mark.parametrize(
    "text, value",
    [
        ("010", 10),  # YAML 1.1: octal 8
        ("1e-4", 1e-4),  # YAML 1.1: a string
        ("-2.5E+3", -2500.0),
        (".5", 0.5),
        ("0o17", 15),
        ("0x1f", 31),
        ("1_000", "1_000"),  # YAML 1.1: 1000
        ("12:30", "12:30"),  # YAML 1.1: 750
        ("0b11", "0b11"),  # YAML 1.1: 3
        ("[1e-4, 1e-2]", [1e-4, 1e-2]),
        ("on", "on"),
        ("+.5", 0.5),
        ("-0", 0),
        ("-.inf", -math.inf),
    ],
)
def test_numbers_are_yaml_1_2s(text, value):
    assert yaml12.load(text) == value and type(yaml12.load(text)) is type(value)


def test_a_preset_that_is_not_utf8_text_is_a_folder_or_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ConfigError, match="binary.yaml is not UTF-8 text; a preset is a YAML file"):
        load_preset(str(tmp_path / "binary.yaml"))
    with pytest.raises(ConfigError, match="folder.yaml is a folder, not a file"):
        load_preset(str(tmp_path / "folder.yaml"))
    with pytest.raises(ConfigError, match="is a folder; pass a YAML file in it, or a preset by name"):
        load_preset(str(tmp_path))
    # a file that exists and that reading fails on (even for root: offset 0 of a process's memory is unmapped)
    with pytest.raises(ConfigError, match=r"^preset file /proc/self/mem cannot be read \(Input/output error\)$"):
        load_preset("/proc/self/mem")


def test_an_explicit_int_tag_on_text_that_is_no_int_is_a_yaml_error():
    with pytest.raises(yaml.YAMLError, match="'0b11' is not a YAML 1.2 int"):
        yaml12.load("!!int 0b11")


def test_an_override_with_nothing_after_the_equals_sign_is_refused():
    with pytest.raises(ConfigError, match=r"^override 'tracking.tracking_uri=' has no value after the =; give one"):
        parse_override("tracking.tracking_uri=")


def test_a_seed_with_a_leading_zero_is_that_seed():
    assert (
        build_config("fedvpt", [{"federation": {"seed": parse_override("federation.seed=010")[2]}}]).federation.seed
        == 10
    )


def test_paths_are_absolute_in_the_config_whatever_folder_it_was_built_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "w.safetensors").write_bytes(b"")
    config = build_config(
        "fedvpt", [{"data": {"dataset": "parquet", "data_dir": "d.parquet"}, "model": {"weights": "~/w.safetensors"}}]
    )
    assert config.data.data_dir == str(tmp_path / "d.parquet")
    assert config.model.weights == str(tmp_path / "home" / "w.safetensors")
    # the store a run's checkpoint records: a relative SQLite path is absolute, a server's address as given
    tracking = {"tracking_uri": "sqlite:///runs/mlflow.db"}
    assert (
        build_config("fedvpt", [{"tracking": tracking}]).tracking.resolved_uri == f"sqlite:///{tmp_path}/runs/mlflow.db"
    )
    tracking = {"tracking_uri": "http://127.0.0.1:5000"}
    assert build_config("fedvpt", [{"tracking": tracking}]).tracking.resolved_uri == "http://127.0.0.1:5000"
    # a scheme in capitals is the same store (URL parsers, MLflow's included, read schemes in lower case)
    for given, resolved in (
        ("HTTPS://Host:5000/Path", "https://Host:5000/Path"),
        ("SQLite:///r.db", f"sqlite:///{tmp_path}/r.db"),
    ):
        assert build_config("fedvpt", [{"tracking": {"tracking_uri": given}}]).tracking.resolved_uri == resolved


def test_a_recorded_config_with_a_data_dir_its_built_in_data_set_ignored_still_builds():
    """Runs recorded before --data-dir was refused for built-in data sets resume and replay: the key did nothing."""
    recorded = {"data": {"dataset": "digits", "data_dir": "/data/digit_five", "partition": "iid"}}
    assert (
        build_config("fedavg", [as_recorded(recorded)]).data
        == build_config("fedavg", [{"data": {"dataset": "digits", "partition": "iid"}}]).data
    )
    on_disk = {"data": {"dataset": "parquet", "data_dir": "/data/rows.parquet"}}
    assert as_recorded(on_disk) == on_disk


def test_an_option_of_a_method_without_options_says_it_has_none():
    with pytest.raises(
        ConfigError, match=r"^unknown key fedavg.bogus: fedavg has no options of its own \(a config key"
    ):
        build_config("fedavg", [{"fedavg": {"bogus": 1}}])


def test_unknown_method_lists_valid_names():
    with pytest.raises(
        ConfigError,
        match="valid methods: " + ", ".join(METHODS),
    ):
        build_config("fedsgd", [])


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_override("rounds=3")


def test_presets_are_listed_loaded_and_valid():
    names = presets()
    assert names.get("quick")
    for name in names:
        for method in ("fedvpt", "sgpt", "fgpt-u"):  # a preset may carry several methods' option sections
            build_config(method, [preset_for_method(load_preset(name), method)])


def test_preset_file_and_errors(tmp_path, monkeypatch):
    good = tmp_path / "mine.yaml"
    good.write_text("federation: {rounds: 2}\n")
    assert build_config("fedvpt", [load_preset(str(good))]).federation.rounds == 2
    with pytest.raises(ConfigError, match="valid presets"):
        load_preset("no-such-preset")
    bad = tmp_path / "bad.yaml"
    bad.write_text("federation: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_preset(str(bad))
    (tmp_path / "quick").mkdir()  # a folder named like a preset does not hide the preset
    monkeypatch.chdir(tmp_path)
    assert load_preset("quick") == load_preset(str(resources.files("raysim.config.presets") / "quick.yaml"))


def test_block_lists_hold_whole_numbers():
    with pytest.raises(ConfigError, match=r"sgpt.shared_blocks=\[True\] must be a list of whole numbers"):
        build_config("sgpt", [{"sgpt": {"shared_blocks": [True]}}])
    assert build_config("sgpt", [{"sgpt": {"shared_blocks": [0, 1]}}]).options.shared_blocks == (0, 1)


def test_resolved_config_round_trips_through_yaml():
    config = build_config("fedprox", [{"fedprox": {"mu": 0.5}, "federation": {"rounds": 3}}])
    data = yaml.safe_load(dump_yaml(config))
    again = build_config(data.pop("method"), [data])
    assert again == config


def test_a_preset_carries_options_for_several_methods(tmp_path):
    from raysim.config import preset_for_method

    path = tmp_path / "setting.yaml"
    path.write_text("federation: {rounds: 4}\nfedprox: {mu: 0.3}\nfedvpt: {prompt_length: 3}\n")
    preset = load_preset(str(path))
    assert build_config("fedprox", [preset_for_method(preset, "fedprox")]).options.mu == pytest.approx(0.3)
    vpt = build_config("fedvpt", [preset_for_method(preset, "fedvpt")])
    assert vpt.options.prompt_length == 3 and vpt.federation.rounds == 4
    with pytest.raises(ConfigError, match="unknown section 'fedprox'"):
        build_config("fedvpt", [preset])  # --set style layers keep rejecting other methods' sections


@pytest.mark.parametrize(
    "clients, participation, unseen_fraction, unseen, per_round",
    [
        (100, 0.05, 0.1, 10, 5),  # 0.05 x 90 trainable = 4.5: 5 (Python's round gives 4)
        (25, 0.1, 0.0, 0, 3),  # 2.5: 3 (round: 2)
        (15, 0.1, 0.0, 0, 2),  # 1.5000000000000002: 2
        (30, 0.15, 0.0, 0, 5),  # 4.5 however floating point lands
        (50, 0.1, 0.05, 3, 5),  # 2.5 unseen: 3; 0.1 x 47 = 4.7: 5
        (10, 0.01, 0.0, 0, 1),  # 0.1: at least 1
    ],
)
def test_clients_per_round_and_unseen_clients_round_halves_up(
    clients, participation, unseen_fraction, unseen, per_round
):
    fed = build_config(
        "fedvpt",
        [{"federation": {"clients": clients, "participation": participation, "unseen_fraction": unseen_fraction}}],
    ).federation
    assert (fed.unseen_clients, fed.clients_per_round) == (unseen, per_round)


def test_holding_out_every_client_is_one_line():
    with pytest.raises(ConfigError) as error:
        build_config("fedvpt", [{"federation": {"clients": 5, "unseen_fraction": 0.9}}])  # 4.5 held out: 5
    assert str(error.value) == (
        "federation.unseen_fraction=0.9 holds out all 5 clients; lower it below 0.9 or add clients"
    )


@pytest.mark.parametrize(
    "methods, preset, layers, expected",
    [
        (["fedgcr"], None, [], "offline-digit5-dif10"),  # the default data give clients no type
        (["fedgr", "fedvpt"], None, [{"federation": {"rounds": 1}}], "offline-digit5-dif10"),  # a comparison with it
        (["fedgcr"], "quick", [], None),  # the user's preset wins
        (["fedgcr"], None, [{"data": {"dataset": "digits5"}}], None),  # so do their data set
        (["fedgcr"], None, [{"data": {"partition": "domains"}}], None),  # and partition
        (["sgpt"], None, [], None),  # the default data serve it
    ],
)
def test_a_method_runs_on_its_own_setting_only_when_the_user_chose_none(methods, preset, layers, expected):
    assert own_setting(methods, preset, layers) == expected


def test_every_declared_setting_is_a_preset_on_which_its_method_has_client_types():
    for name, info in METHODS.items():
        if info.setting is not None:
            config = build_config(name, [preset_for_method(load_preset(info.setting), name)])
            assert config.data.partition == "domains" or not info.needs_client_types, name
    assert setting_note(["fedgcr"], "offline-digit5-dif10") == (
        "fedgcr needs client types: using the offline-digit5-dif10 setting (--preset offline-digit5-dif10); pass "
        "--dataset/--partition or --preset to choose another"
    )


def test_every_partition_knob_belongs_to_the_partition_that_reads_it():
    """A knob no partition claims would pass the check below unseen: each PartitionParams field is one partition's."""
    claimed = [key for _, partitioner in PARTITIONERS.items() for key in partitioner.knobs]
    assert sorted(claimed) == sorted(f.name for f in fields(PartitionParams))


def test_a_users_partition_knob_the_partition_does_not_read_is_refused_and_a_presets_is_not():
    refuse_unread_partition_keys([{"data": {"partition": "pathological", "s": 3}}], "pathological")
    with pytest.raises(ConfigError, match=r"^data.beta_fine is the pachinko partition's, .* domains \(reads dif, "):
        refuse_unread_partition_keys([{}, {"data": {"beta_fine": 3.0}}], "domains")
    preset = {"data": {"partition": "dirichlet", "alpha": 0.3}}  # a flag picks another partition: alpha stays behind
    flags = [{"data": {"partition": "iid"}}]
    assert build_config("fedavg", [preset, *flags]).data.partition == "iid"
    refuse_unread_partition_keys(flags, "iid")
