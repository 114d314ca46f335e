"""quiet_stderr keeps llama.cpp's log lines (fd 2 and llama-cpp-python's sys.stderr callback)
out of the terminal and pytest's captured output, unless EQUIV_LLAMA_LOG asks for them."""

import os
import sys

import pytest

from equiv.models.quiet import LOG_ENV, quiet_stderr


def _chatter():
    os.write(2, b"fd2: llama_model_loader chatter\n")
    print("llama_kv_cache_iswa: using full-size SWA cache", file=sys.stderr)


def test_both_kinds_of_chatter_are_dropped(capfd, monkeypatch):
    monkeypatch.delenv(LOG_ENV, raising=False)
    with quiet_stderr():
        _chatter()
    print("after", file=sys.stderr)
    err = capfd.readouterr().err
    assert "llama_" not in err
    assert "after" in err  # stderr is back


@pytest.mark.parametrize("value", ["1", "yes"])
def test_equiv_llama_log_keeps_them(capfd, monkeypatch, value):
    monkeypatch.setenv(LOG_ENV, value)
    with quiet_stderr():
        _chatter()
    err = capfd.readouterr().err
    assert "llama_model_loader" in err
    assert "llama_kv_cache_iswa" in err
