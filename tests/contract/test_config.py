"""The SRM-style properties file: hierarchy, replications and located errors."""

from __future__ import annotations

import logging

import pytest

from contract.config import ClusterSettings, ConfigError, Replication, load_config, parse_config
from contract.replication_policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from tests.sample_properties import BASE, NAME, THREE, parse


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, NAME)
    return caught.value


# -- clusters and target lists ------------------------------------------------------------------


def test_clusters_and_bootstrap_servers():
    config = parse()
    assert list(config.clusters) == ["east", "west"]
    assert config.clusters["east"] == ClusterSettings("east", "east-1:9092,east-2:9092", {})
    assert config.path == NAME


def test_target_lists_default_to_all_clusters():
    config = parse()
    assert config.driver_target_clusters == ["east", "west"]
    assert config.service_target_clusters == ["east", "west"]
    assert config.service_remote_clusters == []


def test_service_targets_default_to_driver_targets():
    config = parse("driver.target.clusters = west\n")
    assert config.driver_target_clusters == ["west"]
    assert config.service_target_clusters == ["west"]
    assert parse("service.target.clusters = east\n").service_target_clusters == ["east"]


def test_remote_clusters_are_not_driver_targets_by_default():
    config = parse("service.remote.clusters = west\n")
    assert config.service_remote_clusters == ["west"]
    assert config.driver_target_clusters == ["east"]
    assert parse(
        "service.remote.clusters = west\ndriver.target.clusters = east, west\n"
    ).driver_target_clusters == [
        "east",
        "west",
    ]


def test_cluster_settings_do_not_show_credentials():
    config = parse("east.sasl.username = srm\neast.sasl.password = hunter2\n")
    assert "hunter2" not in repr(config.clusters["east"])
    assert "hunter2" not in repr(config)
    assert config.clusters["east"].client_properties["sasl.password"] == "hunter2"


# -- the hierarchy ------------------------------------------------------------------------------

LEVELS = [
    ("A->B.tasks.max", "1"),
    ("B.tasks.max", "2"),
    ("A.tasks.max", "3"),
    ("connectors.tasks.max", "4"),
    ("workers.tasks.max", "5"),
    ("tasks.max", "6"),
]


@pytest.mark.parametrize("most_specific", range(len(LEVELS)))
def test_most_specific_level_wins(most_specific):
    present = LEVELS[most_specific:]
    config = parse("".join(f"{key} = {value}\n" for key, value in reversed(present)), THREE)
    assert config.get("tasks.max", "A", "B") == present[0][1]
    assert config.get_int("tasks.max", "A", "B") == int(present[0][1])


def test_target_alias_wins_over_source_alias():
    config = parse(
        "A.emit.checkpoints.interval.seconds = 10\nB.emit.checkpoints.interval.seconds = 20\n", THREE
    )
    assert config.get_float("emit.checkpoints.interval.seconds", "A", "B") == 20.0
    assert config.get_float("emit.checkpoints.interval.seconds", "B", "A") == 10.0
    assert config.get_float("emit.checkpoints.interval.seconds", "A", "C") == 10.0


def test_lookups_with_one_alias_or_none():
    config = parse("A.tasks.max = 3\ntasks.max = 6\nA->B.tasks.max = 1\n", THREE)
    assert config.get("tasks.max", source="A") == "3"
    assert config.get("tasks.max", target="A") == "3"
    assert config.get("tasks.max", target="B") == "6"
    assert config.get("tasks.max") == "6"


def test_missing_keys_give_the_default():
    config = parse()
    assert config.get("nothing") is None
    assert config.get("nothing", default="x") == "x"
    assert config.get_int("nothing", default=7) == 7
    assert config.get_bool("nothing", "east", "west", default=True) is True
    assert config.get_list("nothing") == []
    assert config.get_list("nothing", default=["a"]) == ["a"]


def test_values_are_trimmed_and_typed():
    config = parse("flag = TRUE \nratio = 0.25\ncount = -3\nnames = a , b,, c ,\nempty =\n")
    assert config.get("flag") == "TRUE"
    assert config.get_bool("flag") is True
    assert config.get_float("ratio") == 0.25
    assert config.get_int("count") == -3
    assert config.get_list("names") == ["a", "b", "c"]
    assert config.get_list("empty", default=["x"]) == []


def test_continuation_lines_and_escapes_are_parsed_like_java():
    config = parse("long = one, \\\n    two\nunicode = caf\\u00e9\nsep : colon\n")
    assert config.get_list("long") == ["one", "two"]
    assert config.get("unicode") == "café"
    assert config.get("sep") == "colon"


@pytest.mark.parametrize(
    ("getter", "value", "expected"),
    [
        ("get_int", "1.5", "an integer"),
        ("get_float", "fast", "a number"),
        ("get_bool", "yes", "true or false"),
    ],
)
def test_bad_typed_value_names_file_line_and_key(getter, value, expected):
    config = parse(f"# comment\nservice.thing = {value}\n")
    with pytest.raises(ConfigError) as caught:
        getattr(config, getter)("service.thing")
    assert str(caught.value) == f"{NAME}:5: service.thing: expected {expected}, got '{value}'"
    assert caught.value.line == 5
    assert caught.value.key == "service.thing"


@pytest.mark.parametrize("line", [
    "sync.topic.acls.interval.seconds = 0",
    "east->west.sync.topic.acls.interval.seconds = -5",
    "west.refresh.groups.interval.seconds = 0",
    "workers.metrics.period = 0",
    "aggregator.trigger.interval.ms = 0",
    "service.advertisement.interval.seconds = -1",
])
def test_every_interval_setting_must_be_positive_when_the_file_loads(line):
    key, value = line.split(" = ")
    error = error_of(BASE + f"# intervals\n{line}\n")
    assert (error.line, error.key) == (5, key)
    assert str(error).startswith(f"{NAME}:5: {key}: must be greater than 0, got '{value}'")


def test_the_positive_rule_is_one_rule_of_the_settings_table():
    from contract.settings import SETTINGS

    intervals = {key for key, setting in SETTINGS.items() if setting.positive}
    assert {"sync.topic.acls.interval.seconds", "refresh.topics.interval.seconds", "metrics.period",
            "emit.heartbeats.interval.seconds", "aggregator.trigger.interval.ms"} <= intervals
    assert "offset.lag.max" not in intervals and "service.remote.timeout.ms" not in intervals
    config = parse("sync.topic.acls.interval.seconds = 0.5\n")
    assert config.setting("sync.topic.acls.interval.seconds") == 0.5


def test_bad_secret_value_is_not_shown():
    config = parse("east.ssl.key.password = not-a-number\n")
    with pytest.raises(ConfigError) as caught:
        config.get_int("ssl.key.password", source="east")
    assert "not-a-number" not in str(caught.value)
    assert "redacted" in str(caught.value)


def test_config_error_points_at_the_entry_get_would_use():
    config = parse("topics = a\nA->B.topics = b\n", THREE)
    error = config.config_error("topics", "bad pattern", "A", "B")
    assert str(error) == f"{NAME}:6: A->B.topics: bad pattern"
    assert str(config.config_error("absent", "needed")) == f"{NAME}: absent: needed"


def test_line_numbers_count_comments_blank_lines_continuations_and_crlf():
    text = (
        "! header\r\n\r\nclusters = a, \\\r\n  b\r\n"
        "a.bootstrap.servers = x\rb.bootstrap.servers = y\nbad = z\n"
    )
    config = parse_config(text, NAME)
    assert config.line_of("clusters") == 3
    assert config.line_of("a.bootstrap.servers") == 5
    assert config.line_of("b.bootstrap.servers") == 6
    assert config.line_of("bad") == 7


def test_repeated_key_last_wins_with_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="contract.config")
    config = parse("tasks.max = 1\ntasks.max = 2\n")
    assert config.get_int("tasks.max") == 2
    assert config.line_of("tasks.max") == 5
    assert "srm.properties:5: tasks.max repeats line 4" in caplog.text


# -- replications -------------------------------------------------------------------------------


def test_every_pair_emits_heartbeats_but_none_is_enabled_by_default():
    config = parse("", THREE)
    pairs = {(r.source, r.target): r for r in config.replications()}
    assert len(pairs) == 6
    assert all(not r.enabled and r.emit_heartbeats for r in pairs.values())


def test_enabled_replication():
    config = parse("A->B.enabled = true\n", THREE)
    pairs = {r.name: r for r in config.replications()}
    assert pairs["A->B"] == Replication("A", "B", enabled=True, emit_heartbeats=True)
    assert not pairs["B->A"].enabled


def test_disabled_pair_without_heartbeats_is_omitted():
    config = parse("A->B.enabled = true\nemit.heartbeats.enabled = false\n", THREE)
    assert config.replications() == [Replication("A", "B", enabled=True, emit_heartbeats=False)]


def test_heartbeats_switch_follows_the_hierarchy():
    config = parse("emit.heartbeats.enabled = false\nC->A.emit.heartbeats.enabled = true\n", THREE)
    assert [r.name for r in config.replications()] == ["C->A"]


def test_only_pairs_into_driver_targets():
    config = parse("driver.target.clusters = B\nA->B.enabled = true\nB->A.enabled = true\n", THREE)
    assert sorted(r.name for r in config.replications()) == ["A->B", "C->B"]


def test_replication_policy_from_the_hierarchy():
    config = parse(
        "replication.policy.separator = _\n"
        "A->B.replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n",
        THREE,
    )
    identity = config.replication_policy("A", "B")
    assert isinstance(identity, IdentityReplicationPolicy)
    assert identity.topic_source("orders") == "A"
    default = config.replication_policy("B", "C")
    assert type(default) is DefaultReplicationPolicy
    assert default.format_remote_topic("B", "t") == "B_t"


def test_internal_topic_separator_switch_reaches_the_policy():
    config = parse(
        "replication.policy.separator = _\nreplication.policy.internal.topic.separator.enabled = false\n"
    )
    assert config.replication_policy("east", "west").checkpoints_topic("east") == "east.checkpoints.internal"


# -- located errors at load time ----------------------------------------------------------------


def test_unreadable_file_names_the_file(tmp_path):
    missing = tmp_path / "absent.properties"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value).startswith(f"{missing}: cannot read")


def test_load_config_reads_a_file(tmp_path):
    path = tmp_path / "srm.properties"
    path.write_text(BASE + "A.note = ok\n", encoding="utf-8")
    config = load_config(path)
    assert config.path == str(path)
    assert config.get("A.note") == "ok"


def test_load_config_accepts_latin1_files_like_java(tmp_path):
    path = tmp_path / "srm.properties"
    path.write_bytes((BASE + "owner = Jos\xe9\n").encode("latin-1"))
    assert load_config(path).get("owner") == "José"


def test_errors_of_a_loaded_file_name_its_path(tmp_path):
    path = tmp_path / "srm.properties"
    path.write_text(BASE + "east->west.enabled = maybe\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}:4: east->west.enabled: expected true or false, got 'maybe'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("east.bootstrap.servers = x\n", f"{NAME}: clusters: missing; list the cluster aliases"),
        ("clusters = , \n", f"{NAME}:1: clusters: lists no cluster alias"),
        ("clusters = a, a\na.bootstrap.servers = x\n", f"{NAME}:1: clusters: lists an alias twice"),
        ("clusters = a b\n", f"{NAME}:1: clusters: alias 'a b' may only contain"),
        ("clusters = workers\n", f"{NAME}:1: clusters: alias 'workers' is a reserved prefix"),
        (
            "clusters = us.west\n",
            f"{NAME}:1: clusters: alias 'us.west' contains the replication separator '.'",
        ),
        (
            "# c\nclusters = a, b\na.bootstrap.servers = x\n",
            f"{NAME}:2: b.bootstrap.servers: missing or empty",
        ),
        ("clusters = a\na.bootstrap.servers =\n", f"{NAME}:2: a.bootstrap.servers: missing or empty"),
    ],
)
def test_cluster_list_errors(text, expected):
    assert str(error_of(text)).startswith(expected)


def test_dotted_alias_is_fine_with_another_separator():
    config = parse_config(
        "clusters = us.west\nreplication.policy.separator = _\nus.west.bootstrap.servers = x\n", NAME
    )
    assert list(config.clusters) == ["us.west"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("north->east.enabled = true\n", "4: north->east.enabled: source alias 'north' is not listed"),
        ("east->north.enabled = true\n", "4: east->north.enabled: target alias 'north' is not listed"),
        ("east->east.enabled = true\n", "4: east->east.enabled: source and target are the same cluster"),
        (
            "driver.target.clusters = east, north\n",
            "4: driver.target.clusters: 'north' not listed in 'clusters'",
        ),
        ("service.target.clusters = south\n", "4: service.target.clusters: 'south' not listed"),
        ("service.remote.clusters = far\n", "4: service.remote.clusters: 'far' not listed"),
    ],
)
def test_unknown_aliases_are_located_errors(extra, expected):
    assert str(error_of(BASE + extra)).startswith(f"{NAME}:{expected}")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("east->west.enabled = yes\n", "east->west.enabled: expected true or false, got 'yes'"),
        ("emit.heartbeats.enabled = 1\n", "emit.heartbeats.enabled: expected true or false, got '1'"),
        ("west.exactly.once = on\n", "west.exactly.once: expected true or false, got 'on'"),
        ("tasks.max = four\n", "tasks.max: expected an integer, got 'four'"),
        ("connectors.offset.lag.max = 1e3\n", "connectors.offset.lag.max: expected an integer, got '1e3'"),
        ("east->west.metrics.period = soon\n", "east->west.metrics.period: expected a number, got 'soon'"),
        (
            "workers.refresh.topics.interval.seconds = nan\n",
            "workers.refresh.topics.interval.seconds: expected",
        ),
    ],
)
def test_bad_known_values_fail_at_load_with_file_line_and_key(extra, expected):
    assert str(error_of(BASE + extra)).startswith(f"{NAME}:4: {expected}")


def test_fractional_intervals_are_accepted():
    config = parse("metrics.period = 2.5\nemit.heartbeats.interval.seconds = 0.5\n")
    assert config.get_float("metrics.period") == 2.5


def test_bad_policy_settings_fail_at_load():
    error = error_of(BASE + "east->west.replication.policy.class = com.example.Policy\n")
    assert str(error).startswith(f"{NAME}:4: east->west.replication.policy.class: unknown replication policy")
    assert "'com.example.Policy'" in str(error)
    assert str(error_of(BASE + "replication.policy.separator =\n")).startswith(
        f"{NAME}:4: replication.policy.separator: replication.policy.separator must not be empty"
    )


def test_invalid_unicode_escape_is_located():
    error = error_of(BASE + "ok = 1\nbad = \\u12G4\n")
    assert str(error).startswith(f"{NAME}:5: invalid \\u escape")
