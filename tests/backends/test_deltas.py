"""The shared delta buffer: streamed text is cut only at whitespace, never after a key's lead-in."""

from __future__ import annotations

from agenter.backends._deltas import DeltaBuffer, cut_point


def test_cut_point_is_after_the_last_whitespace_but_not_after_a_key_lead_in():
    assert cut_point("no space") == 3
    assert cut_point("nospace") == 0
    assert cut_point("line\nnext") == 5
    assert cut_point("tab\tnext") == 4
    assert cut_point("use Bearer ") == 4  # "Bearer" waits for the token after it
    assert cut_point("Authorization: bearer\t") == 15
    assert cut_point('x-api-key: ') == 0
    assert cut_point('"api-key": "') == 0
    assert cut_point("api-key= ") == 0
    assert cut_point("Bearer tok ") == 11


def test_a_key_split_over_pieces_goes_out_whole():
    buffer = DeltaBuffer()
    out = [buffer.feed(piece) for piece in ["The key is sk-ab", "cdef and ", "Bearer ", "tok", "en done"]]
    assert out == ["The key is ", "sk-abcdef and ", "", "", "Bearer token "]
    assert buffer.pending == "done"
    assert buffer.flush() == "done"
    assert buffer.flush() == "" and buffer.pending == ""


def test_the_redactor_when_given_sees_each_delta_whole():
    buffer = DeltaBuffer(lambda s: s.replace("sk-secret", "[REDACTED]"))
    assert buffer.feed("Use sk-se") == "Use "
    assert buffer.feed("cret now") == "[REDACTED] "
    assert buffer.feed(" x-api-key: ") == "now "
    assert buffer.feed("k") == ""
    assert buffer.flush() == "x-api-key: k"


def test_deltas_join_to_the_whole_text():
    text = "Hello there,\nthe key is Bearer sk-abcdefghijklmnop and\tmore words follow here."
    for size in (1, 3, 24):
        buffer = DeltaBuffer()
        pieces = [buffer.feed(text[i:i + size]) for i in range(0, len(text), size)] + [buffer.flush()]
        assert "".join(pieces) == text
        assert all(not p or p[-1].isspace() for p in pieces[:-1])
