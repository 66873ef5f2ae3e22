"""The pattern miner without Spark: ids that survive its saved state, the same ids for the same input, the
fallback over every cluster of a length, and a state that cannot be read."""

from __future__ import annotations

import zlib

import orjson
import pytest

from logport.spark.logs.miner import DrainSettings, PatternMiner, PatternStateError

MESSAGES = [
    "connect from <_>",
    "docker.service: Deactivated successfully.",
    "disconnect from <_> commands=<_>",
    "connect from <_>",
    "logrotate.service: Deactivated successfully.",
    "GET <_> -> <_> in <_> ms",
    "user alice logged in from <_>",
    "DELETE <_> -> <_> in <_> ms",
    "user bob logged in from <_>",
    "Out of memory: Killed process <_> (java)",
]


def test_state_keeps_ids_and_templates() -> None:
    whole = PatternMiner()
    ids = [whole.add(m) for m in MESSAGES]
    first = PatternMiner()
    split = [first.add(m) for m in MESSAGES[:5]]
    second = PatternMiner(first.state())
    split += [second.add(m) for m in MESSAGES[5:]]
    assert split == ids
    assert second.state() == whole.state()
    assert [second.template(i) for i in ids] == [whole.template(i) for i in ids]


def test_templates_and_the_fallback_over_a_length() -> None:
    miner = PatternMiner()
    ids = {m: miner.add(m, count=3) for m in MESSAGES}
    # a variable first word joins the cluster of its length (Drain alone: a cluster per word)
    assert ids["docker.service: Deactivated successfully."] == ids["logrotate.service: Deactivated successfully."]
    assert ids["GET <_> -> <_> in <_> ms"] == ids["DELETE <_> -> <_> in <_> ms"]
    assert miner.template(ids["GET <_> -> <_> in <_> ms"]) == "<*> <*> -> <*> in <*> ms"
    assert miner.template(ids["user alice logged in from <_>"]) == "user <*> logged in from <*>"
    assert ids["connect from <_>"] != ids["disconnect from <_> commands=<_>"]
    assert len({ids[m] for m in MESSAGES}) == 6
    assert miner.drain.id_to_cluster[int(ids["connect from <_>"])].size == 6  # messages, not masked forms


def test_settings_are_the_states() -> None:
    miner = PatternMiner(None, DrainSettings(sim_th=0.9, depth=5, max_children=10))
    miner.add("a b c")
    assert PatternMiner(miner.state()).settings == DrainSettings(sim_th=0.9, depth=5, max_children=10)


@pytest.mark.parametrize("state", [
    b"not zlib",
    zlib.compress(b"not json"),
    zlib.compress(orjson.dumps({"format": 1, "drain": {}})),
    zlib.compress(orjson.dumps([1, 2])),
    zlib.compress(orjson.dumps({"format": 1, "drain": {"sim_th": 0.5, "depth": 4, "max_children": 100},
                                "counter": 1, "clusters": [[1, 1]], "tree": [[], {}]})),
])
def test_unreadable_state(state: bytes) -> None:
    with pytest.raises(PatternStateError, match="--rebuild"):
        PatternMiner(state)


def test_state_of_another_format() -> None:
    with pytest.raises(PatternStateError, match="format 2"):
        PatternMiner(zlib.compress(orjson.dumps({"format": 2})))
