"""How a file is shown to a model in a prompt (patch mode's context and retry prompts), and how a
reply that writes files back in that form is read: one format, its writer and its reader together.
"""

from __future__ import annotations

import re

__all__ = ["as_fenced", "file_block"]


def file_block(path: str, text: str, note: str = "") -> str:
    """`path`'s `text` as a prompt shows it: between `===== path =====` and `===== end of path =====`
    (`note` after the path on the first line)."""
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"===== {path}{note} =====\n{body}===== end of {path} ====="


#: A file written back as `file_block` shows one (measured: asked again for the files, the model
#: copied the prompt's "===== path =====" form instead of a ``` block).
_SHOWN_FILE = re.compile(r"^===== (?P<path>[^\s=]+) =====\n(?P<body>.*?)^===== end of (?P=path) =====[ \t]*$",
                         re.MULTILINE | re.DOTALL)


def as_fenced(text: str) -> str:
    """`text` with each file given in `file_block`'s form turned into a path line and a ``` block."""
    return _SHOWN_FILE.sub(lambda m: f"{m['path']}\n```\n{m['body']}```", text)
