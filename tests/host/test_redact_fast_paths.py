"""Redactor's fast paths (skipping the pattern scans, looking at a list whole) redact exactly
what the plain algorithm does: every secret, every key shape, whatever the case or the list."""

from __future__ import annotations

import random
from enum import Enum

from agenter.host.redact import _SECRET_PATTERNS, Redactor


def plain(secrets: list[str], text: str) -> str:
    """The algorithm without shortcuts: every secret, then every pattern, on every text."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "[REDACTED]")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[REDACTED]", text)
    return text


PIECES = ["sk-", "sk-abcdefghij12", "sk-abcdefghij1234567", "task", "ghp_", "github_pat_", "ghp_" + "a1" * 18,
          "AIza" + "b" * 22, "Bearer ", "BEARER\t", "bearer  ", "x-api-key: ",
          "X-API-\u212aEY=", "x-goog-api-key:'", "api-\u212aey", "bear\u0131r ", "\u0130", "abcdefgh1234",
          "hello ", "pkg/mod.py", "\u00e9t\u00e9 ", "topsecret-value", "\n", " ", "\"", "'", ",", "-", "A"]


def test_texts_are_redacted_as_by_the_plain_algorithm() -> None:
    rng = random.Random(12)
    secrets = ["topsecret-value", "abcd1234"]
    redactor = Redactor(env={}, extra=secrets)
    redactor._secrets = sorted(secrets, key=len, reverse=True)  # none from this machine's environment
    for _ in range(20000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 8)))
        assert redactor(text) == plain(secrets, text), repr(text)


def test_case_folded_key_shapes_are_caught() -> None:
    redactor = Redactor(env={})
    assert redactor("X-API-\u212aEY: abcdefgh12") == "X-API-\u212aEY: [REDACTED]"  # a Kelvin sign
    assert redactor("BeArEr abcdefghijk1") == "BeArEr [REDACTED]"


def test_a_list_is_looked_at_whole_and_item_by_item_when_it_holds_anything() -> None:
    redactor = Redactor(env={}, extra=["topsecret-value"])
    clean = [f"pkg/mod{i}.py" for i in range(50)]
    copied = redactor.data(clean)
    assert copied == clean and copied is not clean
    dirty = [*clean, "key topsecret-value", "Bearer abcdefghijk1", 3, None]
    assert redactor.data(dirty) == [*clean, "key [REDACTED]", "Bearer [REDACTED]", 3, None]
    # A match made only by joining two items redacts nothing that is not in one of them.
    assert redactor.data(["sk", "-abcdefghijkl", "x", "y"]) == ["sk", "-abcdefghijkl", "x", "y"]


def test_dicts_are_copied_with_their_values_redacted() -> None:
    redactor = Redactor(env={}, extra=["topsecret-value"])
    files = {f"f{i}.py": f"x = {i}\n" for i in range(10)}
    files["gone.py"] = None  # type: ignore[assignment]
    nested: dict[str, object] = {"files": files, "list": [], "deep": {"a": ("topsecret-value", 1)}}
    out = redactor.data(nested)
    assert isinstance(out, dict)
    assert out["files"] == files and out["files"] is not files
    assert out["list"] == [] and out["list"] is not nested["list"]
    assert out["deep"] == {"a": ["[REDACTED]", 1]}
    files["f1.py"] = "token topsecret-value"
    assert redactor.data(files)["f1.py"] == "token [REDACTED]"  # type: ignore[index]


def test_a_str_enum_comes_back_a_plain_string() -> None:
    class Colour(str, Enum):
        RED = "red"

    out = Redactor(env={})(Colour.RED)
    assert out == "red" and type(out) is str


def _random_data(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.45:
        return rng.choice([*PIECES, "".join(rng.choice(PIECES) for _ in range(3)), 7, 2.5, None, True, ""])
    if roll < 0.7:
        return {rng.choice(["a", "b", "c", 1, "api-key"]): _random_data(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    if roll < 0.9:
        return [_random_data(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return tuple(_random_data(rng, depth + 1) for _ in range(rng.randint(0, 3)))


def _typed(value: object) -> object:
    """The value with the type of every node, so that equal output means the same output."""
    if isinstance(value, dict):
        return ("dict", type(value).__name__, {k: _typed(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, value)


def test_the_json_look_gives_what_the_walk_gives() -> None:
    rng = random.Random(7)
    for secrets in (["topsecret-value", "abcd1234"], ['quote"d-secret', "back\\slash"]):
        redactor = Redactor(env={})
        redactor._secrets = sorted(secrets, key=len, reverse=True)
        for _ in range(3000):
            data = {"event": _random_data(rng), "list": [_random_data(rng) for _ in range(3)]}
            assert _typed(redactor.data(data)) == _typed(redactor._walk(data))


def test_data_that_is_not_plain_json_is_walked() -> None:
    from pathlib import Path

    class Tag(str):
        pass

    redactor = Redactor(env={}, extra=["topsecret-value"])
    path = Path("/tmp/x")
    out = redactor.data({"path": path, "tag": Tag("topsecret-value"), 3: ["ok"], "nested": {"t": ("a", "b")}})
    assert out == {"path": path, "tag": "[REDACTED]", 3: ["ok"], "nested": {"t": ["a", "b"]}}
    clean = redactor.data({"tag": Tag("fine"), 3: ("x",)})
    assert clean == {"tag": "fine", 3: ["x"]} and type(clean["tag"]) is str
    cyclic: list[object] = []
    cyclic.append({"a": "b"})
    assert redactor.data(cyclic) == [{"a": "b"}]
