"""The shared server layer's pieces: token check, key sources, bind check, JSON depth."""

from __future__ import annotations

import time

import pytest

from arborl.serving import bearer_ok, check_bind, is_loopback, json_depth, resolve_key


@pytest.mark.parametrize(
    "header, ok",
    [
        ("Bearer tok", True),
        ("bearer tok", True),  # RFC 7235: the scheme is case-insensitive (was refused)
        ("BEARER tok", True),
        ("Bearer tok ", True),  # trailing whitespace is trimmed from header values
        ("Bearer  tok", False),
        ("Bearer to", False),
        ("Bearer tokk", False),
        ("tok", False),
        ("Basic tok", False),
        ("Bearer ", False),
        ("", False),
        (None, False),
    ],
)
def test_bearer_ok(header, ok):
    assert bearer_ok(header, "tok") is ok


def test_an_empty_token_never_matches():
    assert bearer_ok("Bearer ", "") is False


def test_resolve_key_flag_then_env_then_file(tmp_path, monkeypatch):
    f = tmp_path / "key"
    f.write_text("from-file\n")
    monkeypatch.setenv("K", "from-env")
    assert resolve_key("flag", "K", f) == ("flag", "flag")
    assert resolve_key(None, "K", f) == ("from-env", "$K")
    monkeypatch.delenv("K")
    assert resolve_key(None, "K", f) == ("from-file", str(f))
    assert resolve_key(None, "K", None) == (None, "none")
    f.write_text("\n")
    with pytest.raises(ValueError, match="is empty; put the key on its first line"):
        resolve_key(None, "K", f)
    with pytest.raises(ValueError, match="cannot read the key file"):
        resolve_key(None, "K", tmp_path / "missing")


def test_check_bind_refuses_public_hosts_without_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    check_bind("127.0.0.1", None, "--api-key")
    check_bind("0.0.0.0", "k", "--api-key")
    with pytest.raises(ValueError, match="--host 0.0.0.0 .* give --api-key"):
        check_bind("0.0.0.0", None, "--api-key")


def test_json_depth_counts_nesting_outside_strings():
    assert json_depth(b"{}") == 1 and json_depth(b'{"a": [1, {"b": []}]}') == 4
    assert json_depth(b'{"a": "[[[[[[[[{{{{"}') == 1  # brackets inside strings do not count
    assert json_depth(b'["\\"[[[["]') == 1  # nor after an escaped quote
    t0 = time.monotonic()
    assert json_depth(b"[" * 1_000_000, stop_at=64) == 65  # stops early
    assert time.monotonic() - t0 < 1.0
