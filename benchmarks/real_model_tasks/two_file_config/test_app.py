import pytest

from app import load_settings
from config import parse_config

TEXT = """
# comments start with #
host = example.org
port=8080

   # an indented comment
debug = True
"""


def test_parse_config():
    assert parse_config(TEXT) == {"host": "example.org", "port": "8080", "debug": "True"}


def test_later_line_wins_and_values_keep_inner_spaces():
    assert parse_config("name = a b\nname = c d = e\n") == {"name": "c d = e"}


@pytest.mark.parametrize("bad", ["just words", " = value", "a = 1\n=2"])
def test_parse_config_rejects(bad):
    with pytest.raises(ValueError):
        parse_config(bad)


def test_load_settings():
    assert load_settings(TEXT) == {"host": "example.org", "port": 8080, "workers": 2, "debug": True}


def test_defaults_only():
    assert load_settings("") == {"host": "localhost", "port": 8000, "workers": 2, "debug": False}


def test_workers_and_debug():
    assert load_settings("workers = 8\ndebug = FALSE") == {
        "host": "localhost", "port": 8000, "workers": 8, "debug": False}


def test_bad_debug_value():
    with pytest.raises(ValueError):
        load_settings("debug = yes")
