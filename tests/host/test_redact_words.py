"""Key shapes are redacted where a key stands, and ordinary words that merely contain a key's
prefix are not: `task-scheduler.py`, `ask-a-scientist`, `mask-rcnn` stay as they are, in events
and in the result's texts. A corpus of realistic prose and paths, every real key shape in the
places keys appear, and generated words and keys (hypothesis)."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

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


async def test_prose_and_paths_pass_through_a_run_untouched(tmp_path) -> None:
    """Through execute(), with the real environment's redactor: the corpus as the agent's reply
    and files named like it come back as they were, in the result, its events and its transcript."""
    import json

    from agenter import AutonomousCodingAgent, CodingStatus
    from agenter.testing import FunctionBackend

    corpus = "\n".join(ORDINARY)
    names = ["task-scheduler.py", "ask-a-scientist/README.md", "mask-rcnn/mask-rcnn_R_50_FPN_3x.yaml"]

    def turn(ctx):
        return [*(ctx.write(name, corpus + "\n") for name in names), corpus]

    agent = AutonomousCodingAgent(backend=FunctionBackend, turn=turn, log_dir=tmp_path / "runs", validators=[])
    work = tmp_path / "work"
    work.mkdir()
    events = [event async for event in agent.stream_execute("Tidy the repository.", cwd=work)]
    result = events[-1].result
    assert result is not None and result.status is CodingStatus.COMPLETED, result
    assert result.summary == corpus
    assert result.files == {name: corpus + "\n" for name in names}
    assert events[-1].data["result"]["summary"] == corpus
    assert events[-1].data["result"]["files"] == result.files
    assert [e.data["content"] for e in events if e.data.get("kind") == "text"] == [corpus]
    every = json.dumps([e.data for e in events], default=str)
    assert "[REDACTED]" not in every and all(json.dumps(name) in every for name in names)  # the tool calls' paths
    (transcript,) = (tmp_path / "runs").glob("*.jsonl")
    written = transcript.read_text()
    assert "[REDACTED]" not in written and json.dumps(corpus)[1:-1] in written


async def test_the_result_is_what_the_readme_says(tmp_path) -> None:
    """Through execute(), the README's claim: the result's texts (summary, error, refusal_reason,
    validation_errors, permission_denials) are redacted like the events (a key is hidden, the
    words around it are not), and `files` and `output` stay raw, your repository's contents."""
    from agenter import AutonomousCodingAgent, CodingEventType, CodingStatus
    from agenter._errors import BackendError
    from agenter.permissions import ToolCall
    from agenter.testing import FunctionBackend
    from agenter.validators import ValidationResult

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

    class KeyCheck:
        name, blocking = "keycheck", True

        async def validate(self, files, cwd):
            return ValidationResult(validator="keycheck", passed=False, errors=[f"{key} in task-scheduler.py"])

    async def denied(ctx):
        await ctx.permit(ToolCall(kind="shell", name="Bash", command=f"curl -H 'Authorization: Bearer {key}' x"))
        return turn(ctx)

    failed = await AutonomousCodingAgent(backend=FunctionBackend, turn=denied, permissions=["deny shell:curl*"],
                                         validators=[KeyCheck()], max_iterations=1).execute("Move it.", cwd=tmp_path)
    assert failed.status is CodingStatus.FAILED and failed.validation_errors == [
        "[keycheck] [REDACTED] in task-scheduler.py"]
    assert failed.permission_denials[0]["target"] == "curl -H 'Authorization: Bearer [REDACTED]' x"
    assert key not in str(failed.permission_denials)

    def broken(ctx):
        raise BackendError(f"the agent failed near task-scheduler.py with {key}")

    errored = await AutonomousCodingAgent(backend=FunctionBackend, turn=broken).execute("Move it.", cwd=tmp_path)
    assert errored.error == "the agent failed near task-scheduler.py with [REDACTED]", errored
    refused = await AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: ctx.refuse(f"no: {key}")).execute(
        "Move it.", cwd=tmp_path)
    assert refused.refusal_reason == "no: [REDACTED]", refused

    class Report(BaseModel):
        key: str

    answered = await AutonomousCodingAgent(backend=FunctionBackend, turn=lambda ctx: [ctx.output({"key": key})]).execute(
        "Which key?", cwd=tmp_path, output_type=Report, require_changes=False)
    assert answered.ok and answered.output == Report(key=key), answered.error  # your structured output: raw
