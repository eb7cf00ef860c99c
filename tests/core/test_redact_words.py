"""Key shapes are redacted where a key stands, and ordinary words that merely contain a key's
prefix are not: `task-scheduler.py`, `ask-a-scientist`, `mask-rcnn` stay as they are, in events
and in the result's texts. A corpus of realistic prose and paths, every real key shape in the
places keys appear, and generated words and keys (hypothesis)."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from agenter.host.redact import Redactor

#: Prose, paths and code a coding agent writes, each holding a key prefix inside a word.
ORDINARY = [
    "Moved the cron logic into task-scheduler.py and added tests/test_task-scheduler.py.",
    "Cloned https://github.com/org/ask-a-scientist and ran mask-rcnn on the samples.",
    "pip install flask-sqlalchemy flask-login; see desk-booking/README.md and risk-model/v2.",
    "The kiosk-mode, whisk-cli, tusk-parser and basilisk-engine packages are vendored.",
    "src/disk-usage/report.py: the husk-collector now runs at dusk-2023-10-01.",
    "Use sk-learn (scikit-learn) pipelines; sk-learn-compatible estimators are fine.",
    "monkey-patch the hotkey-handler; turkey-sandwich.txt and api-key-rotation.md are notes.",
    "fix-api-key: handle rotation when the service is down",
    "The x-api-key header is documented in docs/auth.md; x-api-key: required for every call.",
    "Bearer authentication is described in RFC 6750; the bearer of a token may use it.",
    "Added Bearer authentication to client.py, and pallbearer-names.csv is unrelated.",
    "Header: `Authorization: Bearer $OPENAI_API_KEY` (the variable, not a key).",
    "notebooks/graph_utils.py, ghp_like_names_are_ok.md and laughp_tracks.wav were renamed.",
    "github_pat.md explains how to create a token; gho_utils.py and ghs_config.yaml are code.",
    "The AIzawa-collection and tAIza_foo.py are file names, not keys.",
    "ask-a-question-2024-edition-final.md and task-12345678901234567890.log were archived.",
    "renamed mask-rcnn_R_50_FPN_3x.yaml to mask-rcnn-resnet50-fpn-3x-coco.yaml",
]

#: Real key shapes (made-up values of the real lengths), in the places keys appear.
KEYS = [
    "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2,
    "sk-ant-api03-" + "x7Yq2" * 19 + "-AA",
    "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V2w3X4",
    "sk-" + "0123456789abcdef" * 2,  # DeepSeek: 32 hex digits
    "AIza" + "SyD4-k9" * 5,
    "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "gho_" + "z9Y8x7W6v5U4t3S2r1Q0p9O8n7M6l5K4j3I2",
    "github_pat_11ABCDEFG0123456789_" + "abcdEFGH1234" * 5,
]
CONTEXTS = ["{}", "OPENAI_API_KEY={}", 'api_key="{}"', "key: '{}'", '{{"api_key": "{}"}}', "export K={} && run",
            "the key is {}.", "({})", "<{}>", "token={}&x=1", "`{}`"]


def redactor() -> Redactor:
    made = Redactor(env={})
    made._secrets = []  # only the shapes: nothing from this machine's environment
    return made


def test_ordinary_prose_and_paths_are_left_as_they_are() -> None:
    redact = redactor()
    for text in ORDINARY:
        assert redact(text) == text


def test_every_real_key_shape_is_redacted_wherever_it_stands() -> None:
    redact = redactor()
    for key in KEYS:
        for context in CONTEXTS:
            text = context.format(key)
            out = redact(text)
            assert key not in out and "[REDACTED]" in out, (text, out)
            assert out == context.format("[REDACTED]"), (text, out)


def test_key_headers_and_bearer_tokens_are_redacted() -> None:
    redact = redactor()
    jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    assert redact(f"Authorization: Bearer {jwt}") == "Authorization: Bearer [REDACTED]"
    assert redact("curl -H 'x-api-key: 7f3a9c2e1b' https://x") == "curl -H 'x-api-key: [REDACTED]' https://x"
    assert redact('{"X-Goog-Api-Key": "AbCd1234EfGh"}') == '{"X-Goog-Api-Key": "[REDACTED]"}'
    assert redact("BEARER\tabcd1234efgh") == "BEARER\t[REDACTED]"


WORD = st.text(string.ascii_letters + string.digits, min_size=1, max_size=12)
KEY_CHARS = string.ascii_letters + string.digits


@settings(max_examples=300, deadline=None)
@given(before=WORD, prefix=st.sampled_from(["sk-", "AIza", "ghp_", "gho_", "github_pat_", "x-api-key: ",
                                            "Bearer "]),
       after=st.text(string.ascii_letters + string.digits + "-_", min_size=0, max_size=60))
def test_a_word_that_contains_a_key_prefix_is_not_a_key(before: str, prefix: str, after: str) -> None:
    # A letter or digit right before the prefix: it is inside a word (task-..., mask-..., fix-api-key).
    text = f"see {before}{prefix}{after} here"
    assert redactor()(text) == text


@settings(max_examples=300, deadline=None)
@given(body=st.text(KEY_CHARS, min_size=40, max_size=64), digit=st.sampled_from(string.digits),
       prefix=st.sampled_from(["sk-", "sk-proj-", "sk-ant-api03-", "ghp_", "AIza"]),
       context=st.sampled_from(CONTEXTS))
def test_a_generated_key_of_a_real_shape_is_redacted(body: str, digit: str, prefix: str, context: str) -> None:
    key = prefix + body[:20] + digit + body[20:]
    text = context.format(key)
    assert redactor()(text) == context.format("[REDACTED]")


async def test_the_result_is_what_the_readme_says(tmp_path) -> None:
    """Through execute(): the result's texts are redacted like the events (a key the agent
    writes in its summary is hidden, the words around it are not), and `files` and `output`
    stay raw, your repository's contents."""
    from agenter import AutonomousCodingAgent, CodingEventType, CodingStatus
    from agenter.testing import FunctionBackend

    key = KEYS[0]
    summary = f"Moved it to task-scheduler.py (ask-a-scientist, mask-rcnn); the old key was {key}."

    def turn(ctx):
        ctx.write("task-scheduler.py", f"KEY = '{key}'  # ask-a-scientist\n")
        return summary

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn)
    events = [event async for event in agent.stream_execute("Move it.", cwd=tmp_path)]
    result = events[-1].result
    assert result is not None and result.status is CodingStatus.COMPLETED, result
    expected = summary.replace(key, "[REDACTED]")
    assert result.summary == expected  # the words stay, the key does not
    assert result.files == {"task-scheduler.py": f"KEY = '{key}'  # ask-a-scientist\n"}  # raw
    end = events[-1]
    assert end.type is CodingEventType.SESSION_END and end.data["result"]["summary"] == expected
    assert end.data["result"]["files"] == {"task-scheduler.py": "KEY = '[REDACTED]'  # ask-a-scientist\n"}
    text_events = [e.data["content"] for e in events if e.data.get("kind") == "text"]
    assert text_events == [expected]
