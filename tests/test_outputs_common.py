"""What every durable output shares: its identity kept beside its checkpoint, and a name of its own."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest

from logport.batch import encode_batch
from logport.config import ForwardOutputConfig, StoreConfig, load_config
from logport.errors import ConfigError
from logport.outputs.follower import SegmentFollower
from logport.outputs.forward import ForwardOutput, chunk_id
from logport.store import SegmentStore
from tests.support import free_port, hub_config, running_hub


async def identity_in(data_dir: Path, name: str = "to-b") -> str:
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
    try:
        return SegmentFollower(store, "forward", name).identity()
    finally:
        await store.close()


async def test_identity_is_made_once_and_kept_beside_the_checkpoint(tmp_path: Path) -> None:
    first = await identity_in(tmp_path / "hub")
    assert (tmp_path / "hub" / "outputs" / "to-b.id").read_text() == first
    assert sorted(p.name for p in (tmp_path / "hub" / "outputs").iterdir()) == ["to-b.id"]  # no temporary left
    assert await identity_in(tmp_path / "hub") == first  # a restart reads it back
    assert await identity_in(tmp_path / "hub", "other") != first
    assert await identity_in(tmp_path / "another-hub") != first


async def test_chunk_ids_differ_between_hubs_and_repeat_within_one(tmp_path: Path) -> None:
    one, two = await identity_in(tmp_path / "one"), await identity_in(tmp_path / "two")
    assert chunk_id(one, "forward", 0) == chunk_id(await identity_in(tmp_path / "one"), "forward", 0)
    assert chunk_id(one, "forward", 0) != chunk_id(two, "forward", 0)
    assert chunk_id(one, "forward", 0) != chunk_id(one, "forward", 1)


async def test_new_outputs_get_random_identities(tmp_path: Path) -> None:
    identities = {await identity_in(tmp_path / hub, name) for hub in ("one", "two") for name in ("to-b", "other")}
    assert len(identities) == 4
    assert all(re.fullmatch("[0-9a-f]{32}", identity) for identity in identities)  # secrets.token_hex(16)


async def test_an_output_from_before_identities_keeps_the_chunk_ids_it_sent(tmp_path: Path) -> None:
    """A checkpoint without an identity file was left by a version that made chunk ids from the output's name
    (before b782591); an uncommitted batch that the downstream acknowledged is resent under the same id."""
    data = tmp_path / "data"
    (data / "outputs").mkdir(parents=True)
    (data / "outputs" / "forward-app.checkpoint").write_text("1234")
    config = hub_config(data, [], outputs={"forward": [ForwardOutputConfig(segment="app", port=free_port())]})
    body = encode_batch("app.out", [(1700000000, 0, {"i": 1})], {})
    async with running_hub(config) as hub:
        output = hub.services["output.forward-app"]
        assert isinstance(output, ForwardOutput)
        [(_, chunk)], _ = output.messages([(1234, body)])
    name, segment, offset = "forward-app", "app", 1234  # chunk_id before b782591, from the output's name:
    before = base64.b64encode(hashlib.sha256(f"{name}\0{segment}\0{offset}".encode()).digest()[:16]).decode()
    assert chunk == before
    assert (data / "outputs" / "forward-app.id").read_text() == "forward-app"  # kept, as a random one would be
    assert await identity_in(data, "forward-app") == "forward-app"


async def test_an_identity_once_made_is_kept_beside_its_checkpoint(tmp_path: Path) -> None:
    first = await identity_in(tmp_path)  # a new output: random
    (tmp_path / "outputs" / "to-b.checkpoint").write_text("1234")
    assert await identity_in(tmp_path) == first  # a checkpoint beside an identity is no old version's


@pytest.mark.parametrize(("text", "message"), [
    pytest.param('[[outputs.forward]]\nname = "up"\n[[outputs.forward]]\nname = "up"\nport = 24225\n',
                 r"config key 'outputs.forward\[1\].name' has value 'up'; "
                 r".* outputs.forward\[0\] has the same checkpoint file", id="same-name"),
    pytest.param('[[outputs.forward]]\nsegment = "app"\n[[outputs.forward]]\nsegment = "app"\n',
                 r"config key 'outputs.forward\[1\].segment' has value 'app'; "
                 r".*outputs.forward\[0\].* \(an output without a name is named 'forward-app'\)$", id="same-segment-unnamed"),
    pytest.param('[[outputs.forward]]\nname = "forward-app"\n[[outputs.forward]]\nsegment = "app"\n',
                 r"config key 'outputs.forward\[1\].segment' has value 'app'; "
                 r".*'outputs/forward-app.checkpoint'", id="name-equals-default-name"),
    pytest.param('[[outputs.lumberjack]]\nname = "ls"\n[[outputs.lumberjack]]\nname = "ls"\n',
                 r"config key 'outputs.lumberjack\[1\].name' has value 'ls'; "
                 r".*outputs.lumberjack\[0\]", id="lumberjack-same-name"),
    pytest.param('[[outputs.lumberjack]]\nname = "app"\n[[outputs.lumberjack]]\nsegment = "app"\n',
                 r"config key 'outputs.lumberjack\[1\].segment' has value 'app'; "
                 r".*'outputs/lumberjack.app.checkpoint' \(an output without a name is named 'app'\)$",
                 id="lumberjack-name-equals-default-name"),
    pytest.param('[[outputs.forward]]\nname = "lumberjack.ls"\n[[outputs.lumberjack]]\nname = "ls"\n',
                 r"config key 'outputs.lumberjack\[0\].name' has value 'ls'; "
                 r".*'outputs/lumberjack.ls.checkpoint'", id="across-kinds"),
])
def test_output_names_must_be_unique(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "logport.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


@pytest.mark.parametrize(("text", "message"), [
    pytest.param('[[outputs.forward]]\nname = "../up"\n',
                 r"config key 'outputs.forward\[0\].name' has value '../up'; an output name is a file name: "
                 r"no '/' or NUL, not '.' or '..'$", id="slash"),
    pytest.param('[[outputs.forward]]\nname = ".."\n',
                 r"config key 'outputs.forward\[0\].name' has value '..'; .*not '.' or '..'$", id="dot-dot"),
    pytest.param('[[outputs.lumberjack]]\nname = "a\\u0000b"\n',
                 r"config key 'outputs.lumberjack\[0\].name' has value 'a\\x00b'; .*no '/' or NUL", id="nul"),
    pytest.param('[[outputs.forward]]\nsegment = ""\n',
                 r"config key 'outputs.forward\[0\].segment' has value ''; .*: empty "
                 r"\(an output without a name is named 'forward-'\)$", id="unnamed-empty-segment"),
    pytest.param('[[outputs.forward]]\nsegment = "a/b"\n',
                 r"config key 'outputs.forward\[0\].segment' has value 'a/b'; .*only A-Z.* named 'forward-a/b'\)$",
                 id="unnamed-segment-with-slash"),
    pytest.param(f'[[outputs.forward]]\nname = "{"x" * 245}"\n',
                 r"config key 'outputs.forward\[0\].name' has value 'x{245}'; its checkpoint file name "
                 r"'x{245}.checkpoint' of 256 bytes exceeds 255$", id="checkpoint-file-name-too-long"),
    pytest.param(f'[[outputs.lumberjack]]\nname = "{"x" * 234}"\n',
                 r"'lumberjack.x{234}.checkpoint' of 256 bytes exceeds 255$", id="lumberjack-prefix-counts"),
    pytest.param(f'[[outputs.forward]]\nsegment = "{"x" * 237}"\n',
                 r"config key 'outputs.forward\[0\].segment' has value 'x{237}'; "
                 r"its checkpoint file name 'forward-x{237}.checkpoint' of 256 bytes exceeds 255 \(an output",
                 id="default-name-counts"),
])
def test_output_names_must_be_safe_file_names(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "logport.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_output_names_at_the_file_name_limit_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "logport.toml"
    path.write_text(f'[[outputs.forward]]\nname = "{"x" * 244}"\n[[outputs.lumberjack]]\nname = "{"x" * 233}"\n'
                    f'[[outputs.forward]]\nsegment = "{"x" * 236}"\n[[outputs.forward]]\nname = "Up_1.b-2"\n'
                    '[[outputs.forward]]\nname = "to fluentd @prod"\n')
    config = load_config(path)
    assert [len(o.name) for o in config.outputs.forward] == [244, 0, 8, 16]
    assert len(config.outputs.lumberjack[0].name) == 233


def test_outputs_of_either_kind_may_share_a_name(tmp_path: Path) -> None:
    """A Forward and a Lumberjack output called "up" keep different checkpoints (`lumberjack.up` is the other)."""
    path = tmp_path / "logport.toml"
    path.write_text('[[outputs.forward]]\nname = "up"\n[[outputs.lumberjack]]\nname = "up"\n'
                    '[[outputs.forward]]\nsegment = "app"\n[[outputs.forward]]\nsegment = "other"\n')
    config = load_config(path)
    assert [o.name for o in config.outputs.forward] == ["up", "", ""]


async def test_a_name_and_another_outputs_segment_may_be_the_same(tmp_path: Path) -> None:
    """A Forward output named "app" and an unnamed one on segment "app" (named `forward-app`) keep different
    checkpoints, so both load, and the hub runs both: it keys each output by the name its checkpoint goes by."""
    path = tmp_path / "logport.toml"
    path.write_text('[[outputs.forward]]\nname = "app"\nsegment = "other"\n[[outputs.forward]]\nsegment = "app"\n'
                    '[[outputs.lumberjack]]\nname = "app"\n')
    config = load_config(path, data_dir=str(tmp_path / "data"))
    for section in ("forward", "lumberjack", "segment", "logjam"):
        getattr(config, section).enabled = False
    config.metrics.enabled = False
    async with running_hub(config) as hub:
        outputs = {key: type(service).__name__ for key, service in hub.services.items()}
    assert outputs == {"output.app": "ForwardOutput", "output.forward-app": "ForwardOutput",
                       "output.lumberjack.app": "LumberjackOutput"}
