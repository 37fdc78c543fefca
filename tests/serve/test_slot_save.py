"""``--slot-save-path`` and ``POST /slots/:id?action=save|restore|erase`` (bankml.serve.slot_files), as the pinned
llama-server answers them: a saved slot restored into another one is reused by its next request (``cache_n``), a
plain token list (older llama-servers' files) restores too, erase empties the slot, and every bad request gets
llama-server's status and message (an invalid filename, an unknown action, a slot id stoi refuses, a missing
file; an id past the last slot wraps around). Then a file written by the pinned llama-server restored by bankml,
and one written by bankml restored by llama-server."""

import contextlib
import struct

import httpx
import pytest

from bankml import cli
from bankml.serve.contexts import slot_of_id
from bankml.serve.endpoints import EndpointOptions
from bankml.serve.slot_files import SlotActionError, pack_tokens, slot_index, unpack_tokens, valid_filename

from .serve_support import running_llama_server, smollm2_client

_FIRST = {"prompt": "What is the capital of France?", "temperature": 0, "n_predict": 8, "cache_prompt": True}
_SECOND = dict(_FIRST, prompt="What is the capital of France? And of Germany?")


@pytest.fixture
def client(tmp_path):
    with smollm2_client(n_parallel=2, endpoints=EndpointOptions(slot_save_path=str(tmp_path))) as c:
        yield c


def test_filenames_are_checked_as_llama_server_checks_them():
    for good in ("slot1.bin", "a b", "é.bin", "x" * 255, ".hidden"):
        assert valid_filename(good), good
    for bad in ("", "../x", "a/b", "a\\b", "a..b", ".", "x.", " a", "a ", "a:b", "a*", "a?b", 'a"', "a<b", "a|b",
                "a\x00b", "a\x7fb", "a\x85b", "a\u2215b", "a\ufffd", "a\ud800", "x" * 256, "é" * 128):  # fmt: skip
        assert not valid_filename(bad), repr(bad)


def test_slot_ids_are_read_as_stoi_and_wrap_as_llama_server():
    assert slot_index("1", 2) == (1, 1)
    assert slot_index(" +3abc", 2) == (3, 1)
    assert slot_index("-1", 2) == (-1, 1)  # size_t arithmetic: 2**64 - 1 is odd
    assert slot_index("-1", 3) == (-1, 0)
    for bad in ("", "x", "-", "99999999999"):
        with pytest.raises(SlotActionError, match="Invalid slot ID"):
            slot_index(bad, 2)
    assert slot_of_id(5, 4) == 1


def test_the_packed_token_form_and_a_plain_list():
    assert pack_tokens([5, 6]) == [-1, 1, 2, 5, 6, 0]
    assert unpack_tokens(pack_tokens([5, 6])) == [5, 6]
    assert unpack_tokens([5, 6, 7]) == [5, 6, 7]
    for words, message in (
        ([-1, 2, 0, 0], "Unsupported server tokens state version"),
        ([-1, 1, 5, 1], "Unexpected end of server tokens state"),
        ([-1, 1, 0, 1, 0], "Cannot restore media tokens without an mmproj"),
        ([-1, 1, 0, 0, 7], "Trailing data in server tokens state"),
    ):
        with pytest.raises(ValueError, match=message):
            unpack_tokens(words)


def test_the_flag_wants_a_folder(tmp_path, capsys):
    assert cli.build_parser().parse_args(["serve", "--slot-save-path", str(tmp_path)]).slot_save_path == str(tmp_path)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--slot-save-path", str(tmp_path / "none")])
    assert "not a directory: " in capsys.readouterr().err


def test_a_saved_slot_restored_into_another_is_reused(client, tmp_path):
    first = client.post("/completion", json=dict(_FIRST, id_slot=1)).json()
    assert first["id_slot"] == 1 and first["timings"]["cache_n"] == 0
    saved = client.post("/slots/1?action=save", json={"filename": "slot1.bin"}).json()
    n = first["timings"]["prompt_n"] + first["timings"]["predicted_n"] - 1  # the last token is never decoded
    assert saved["n_saved"] == n and saved["n_written"] == (tmp_path / "slot1.bin").stat().st_size
    assert (saved["id_slot"], saved["filename"], set(saved["timings"])) == (1, "slot1.bin", {"save_ms"})
    fresh = client.post("/completion", json=dict(_SECOND, id_slot=0, cache_prompt=False)).json()
    restored = client.post("/slots/0?action=restore", json={"filename": "slot1.bin"}).json()
    assert (restored["n_restored"], restored["n_read"], set(restored["timings"])) == (
        n,
        saved["n_written"],
        {"restore_ms"},
    )
    again = client.post("/completion", json=dict(_SECOND, id_slot=0)).json()
    assert again["id_slot"] == 0
    assert again["timings"]["cache_n"] == first["timings"]["prompt_n"]  # the restored prompt is reused
    assert again["content"] == fresh["content"]
    erased = client.post("/slots/0?action=erase").json()
    assert erased["id_slot"] == 0 and erased["n_erased"] > 0
    after = client.post("/completion", json=dict(_SECOND, id_slot=0)).json()
    assert after["timings"]["cache_n"] == 0


def test_a_plain_token_list_restores(client, tmp_path):
    client.post("/completion", json=dict(_FIRST, id_slot=1))
    n = client.post("/slots/1?action=save", json={"filename": "packed.bin"}).json()["n_saved"]
    data = bytearray((tmp_path / "packed.bin").read_bytes())
    # the header: magic, version, word count; then the words (-1, 1, n, tokens..., 0) and the KV state
    words = struct.unpack_from("=I", data, 8)[0]
    assert words == n + 4
    tokens = data[12 + 12 : 12 + 12 + 4 * n]
    plain = data[:8] + struct.pack("=I", n) + tokens + data[12 + 4 * words :]
    (tmp_path / "plain.bin").write_bytes(bytes(plain))
    assert client.post("/slots/0?action=restore", json={"filename": "plain.bin"}).json()["n_restored"] == n
    again = client.post("/completion", json=dict(_SECOND, id_slot=0)).json()
    assert again["timings"]["cache_n"] > 0


def test_bad_requests_get_llama_servers_answers(client, tmp_path):
    (tmp_path / "junk.bin").write_bytes(b"not a state file")
    client.post("/completion", json=dict(_FIRST, id_slot=1))
    cases = [
        ("/slots/0?action=save", {"filename": "../escape.bin"}, 400, "Invalid filename"),
        ("/slots/0?action=save", {"filename": "sub/dir.bin"}, 400, "Invalid filename"),
        ("/slots/x?action=save", {"filename": "a.bin"}, 400, "Invalid slot ID"),
        ("/slots/99999999999?action=erase", None, 400, "Invalid slot ID"),
        ("/slots/0?action=load", {"filename": "a.bin"}, 400, "Invalid action"),
        ("/slots/0", None, 400, "Invalid action"),
        (
            "/slots/0?action=restore",
            {"filename": "missing.bin"},
            400,
            "Unable to restore slot: No available space in KV cache or invalid slot save file",
        ),
        (
            "/slots/0?action=restore",
            {"filename": "junk.bin"},
            400,
            "Unable to restore slot: No available space in KV cache or invalid slot save file",
        ),
        # llama-server: the same messages with a 500
        ("/slots/0?action=save", {}, 400, "[json.exception.out_of_range.403] key 'filename' not found"),
        ("/slots/0?action=save", {"filename": 3}, 400, "type must be string, but is number"),
    ]
    for path, body, code, message in cases:
        r = client.post(path, json=body) if body is not None else client.post(path)
        assert r.status_code == code and message in r.json()["error"]["message"], (path, r.json())
    assert not (tmp_path.parent / "escape.bin").exists()
    # an id past the last slot wraps around, as llama-server's get_slot_by_id
    r = client.post("/slots/3?action=erase").json()
    assert r["id_slot"] == 3 and r["n_erased"] > 0


def test_without_the_flag_the_actions_answer_501():
    with smollm2_client() as c:
        r = c.post("/slots/0?action=save", json={"filename": "a.bin"})
        assert r.status_code == 501
        assert r.json()["error"]["message"] == (
            "This server does not support slots action. Start it with `--slot-save-path`"
        )


@contextlib.contextmanager
def _llama_server(folder):
    """The pinned llama-server on SmolLM2 with two slots of 512 tokens (one KV pool: each slot's context is bankml's
    with kv_unified), flash attention auto, saving slots in ``folder``."""
    flags = ["-t", "1", "-tb", "1", "-c", "512", "-np", "2", "-kvu", "--no-warmup", "--slot-save-path", str(folder)]
    with running_llama_server(flags) as base:
        yield httpx.Client(base_url=base, timeout=120)


def test_files_are_exchanged_with_llama_server(tmp_path):
    """With the same KV settings (flash attention, cache types) a state file is libllama's either way: llama-server's
    save restored by bankml gives the next request llama-server's answer and cache_n, and bankml's save restores
    in llama-server."""
    theirs_dir, ours_dir = tmp_path / "theirs", tmp_path / "ours"
    theirs_dir.mkdir()
    ours_dir.mkdir()
    ours = EndpointOptions(slot_save_path=str(ours_dir))
    model = {"flash_attn": "auto", "cache_prompt": True}
    with _llama_server(theirs_dir) as them, smollm2_client(n_parallel=2, model_options=model, endpoints=ours) as us:
        for c in (them, us):
            c.post("/completion", json=dict(_FIRST, id_slot=1))
        saved = [c.post("/slots/1?action=save", json={"filename": "s.bin"}).json() for c in (them, us)]
        assert saved[0]["n_saved"] == saved[1]["n_saved"]
        (ours_dir / "theirs.bin").write_bytes((theirs_dir / "s.bin").read_bytes())
        (theirs_dir / "ours.bin").write_bytes((ours_dir / "s.bin").read_bytes())
        answers = []
        for c in (them, us):
            restored = c.post("/slots/0?action=restore", json={"filename": "ours.bin" if c is them else "theirs.bin"})
            assert restored.json()["n_restored"] == saved[0]["n_saved"], restored.json()
            answers.append(c.post("/completion", json=dict(_SECOND, id_slot=0)).json())
        assert answers[1]["content"] == answers[0]["content"]
        assert answers[1]["timings"]["cache_n"] == answers[0]["timings"]["cache_n"] > 0
        assert answers[1]["timings"]["prompt_n"] == answers[0]["timings"]["prompt_n"]


def test_id_slot_takes_that_slot_and_n_children_take_others(client):
    for id_slot, index in ((1, 1), (0, 0), (3, 1), (-2, 0)):  # -1: any slot
        assert client.post("/completion", json=dict(_FIRST, id_slot=id_slot)).json()["id_slot"] == index
    outs = client.post("/completion", json=dict(_FIRST, id_slot=0, n=2)).json()
    assert sorted(o["id_slot"] for o in outs) == [0, 1]
