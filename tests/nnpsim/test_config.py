"""Configuration: defaults of the reference machine, TOML round trip, clear errors."""
from dataclasses import fields

import pytest

from nnpsim.config import LIMITS, Config, ConfigError, config_from_dict, config_toml, load_config


def test_defaults_are_the_reference_machine():
    c = Config()
    assert (c.nu_rows, c.nu_cols, c.peak_macs_per_cycle) == (32, 32, 1024)
    assert (c.ddr_bytes_per_cycle, c.ddr_latency, c.dm_bytes_per_cycle, c.dm_latency) == (32, 100, 128, 8)
    assert (c.local_bytes_per_cycle, c.local_latency, c.vu_bytes_per_cycle) == (64, 2, 64)
    assert (c.dma_channels, c.queue_depth, c.semaphores) == (4, 16, 32)
    assert (c.dm_bytes, c.ibuf_bytes, c.wbuf_bytes, c.abuf_bytes, c.vbuf_bytes) == (
        2 << 20, 256 << 10, 256 << 10, 128 << 10, 256 << 10)
    assert c.ddr_bytes == 256 << 20
    assert c.ddr_burst_bytes == 64


def test_printed_defaults_load_back(tmp_path):
    p = tmp_path / "hw.toml"
    p.write_text(config_toml())
    assert load_config(p) == Config()


def test_burst_bytes_is_printed_and_read_back(tmp_path):
    assert "[memory.ddr]" in config_toml() and "burst_bytes = 64" in config_toml()
    p = tmp_path / "hw.toml"
    p.write_text(config_toml().replace("burst_bytes = 64", "burst_bytes = 1"))
    assert load_config(p) == Config(ddr_burst_bytes=1)


def test_edited_file_changes_only_that_key(tmp_path):
    p = tmp_path / "hw.toml"
    p.write_text(config_toml().replace("channels = 4", "channels = 8"))
    assert load_config(p) == Config(dma_channels=8)


@pytest.mark.parametrize("data, words", [
    ({"nu": {"rowz": 3}}, "unknown configuration key 'nu.rowz'"),
    ({"dma": {"channels": 9}}, "dma.channels = 9 is out of range [1, 8]"),
    ({"sync": {"semaphores": 0}}, "sync.semaphores = 0 is out of range"),
    ({"memory": {"ddr": {"latency": "x"}}}, "memory.ddr.latency must be an integer"),
    ({"clock": {"ghz": -1.0}}, "clock.ghz must be a positive number"),
    ({"clock": {"ghz": "8"}}, "clock.ghz must be a positive number, got '8'"),
    ({"clock": {"ghz": True}}, "clock.ghz must be a positive number, got True"),
    ({"memory": {"ddr": {"burst_bytes": 48}}}, "memory.ddr.burst_bytes = 48 must be a power of two from 1 to 4096"),
    ({"memory": {"ddr": {"burst_bytes": 0}}}, "memory.ddr.burst_bytes = 0 must be a power of two from 1 to 4096"),
    ({"memory": {"ddr": {"burst_bytes": -64}}}, "memory.ddr.burst_bytes = -64 must be a power of two"),
    ({"memory": {"ddr": {"burst_bytes": 8192}}}, "memory.ddr.burst_bytes = 8192 must be a power of two"),
    ({"memory": {"ddr": {"burst_bytes": 64.0}}}, "memory.ddr.burst_bytes must be an integer"),
    ({"clock": {"ghz": float("nan")}}, "clock.ghz must be a positive number"),
])
def test_bad_values_are_named(data, words):
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data)
    assert words in str(exc.value)


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[nu\ncount = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    binary = tmp_path / "prog.bin"       # a program given where the configuration goes
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)


def test_target_mismatches_name_configuration_keys_only():
    from nnpsim.config import SHAPE_KEYS, shape_target, target_mismatches
    cfg = Config(nu_count=2)
    assert target_mismatches(cfg, shape_target(cfg)) == []
    assert set(shape_target(cfg)) == set(SHAPE_KEYS) and shape_target(cfg)["nu.count"] == 2
    assert target_mismatches(cfg, {"name": "conv1", "note": 7, "nu.count": 2, "nu_rows": 32}) == []
    assert target_mismatches(cfg, {"nu.count": 1, "vu_count": 3, "memory.ddr.latency": "slow"}) == [
        "nu.count = 1 (this machine: nu.count = 2)", "vu_count = 3 (this machine: vu.count = 1)",
        "memory.ddr.latency = 'slow' (this machine: memory.ddr.latency = 100)"]


@pytest.mark.parametrize("key, value", [("nu.rows", 2 ** 64), ("nu.cols", 1025), ("nu.latency", 2 ** 63),
                                        ("memory.dm.size", 1 << 40), ("memory.ddr.size", (1 << 32) + 1),
                                        ("vu.bytes_per_cycle", 1 << 17), ("cu.branch_penalty", 2 ** 64)])
def test_every_value_is_bounded_and_the_range_is_named(key, value):
    section, name = key.rsplit(".", 1)
    data: dict = {}
    node = data
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[name] = value
    with pytest.raises(ConfigError, match=rf"{key} = {value} is out of range \[\d+, \d+\]"):
        config_from_dict(data)


def test_every_field_has_a_range():
    assert sorted(LIMITS) == sorted(f.name for f in fields(Config))
    for f in fields(Config):            # the largest value allowed is accepted
        Config(**{f.name: LIMITS[f.name][1] if f.name != "ddr_burst_bytes" else 4096}).validate()
