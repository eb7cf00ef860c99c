"""What the harness tells its model besides the shared instructions (agenter.backends._prompts):
how to work with its tools, and the notes it adds when a response was cut off or the structured
result is still missing. Every wire sends the same words.
"""

from __future__ import annotations

from agenter.backends._prompts import STRUCTURED_OUTPUT_TOOL_NAME

#: How a message the user sent while the agent worked reaches the model (session.steer).
STEER_NOTE = "The user sent this message while you were working; take it into account:\n\n"
CUTOFF_NUDGE = ("Your last response was cut off at the output limit. Continue where you stopped, "
                "in smaller steps (for example, write a large file in several edits).")
STRUCTURED_NUDGE = (f"You have not called the {STRUCTURED_OUTPUT_TOOL_NAME} tool yet. Call it now with "
                    "the result; the task is not finished until it is accepted.")
#: Text tool-call mode: a reply with a code block, no call, in a turn that changed no file
#: (measured: Qwen2.5-Coder-1.5B answered a task with the new module in a code block and no call,
#: twice in a row; nothing was written). Said once per turn; the model may still end the turn.
CODE_WITHOUT_CALL_NUDGE = (
    "Your reply has a code block but no tool call, so no file has changed. To write the code to a file, "
    "put the call on the line before the block:\n"
    '{"name": "write_file", "arguments": {"path": "FILE"}}\n'
    "```python\n...the whole file...\n```\n"
    "If the task is done, reply without a code block.")
#: The same, when code blocks are read as edits (codeedits.py): the block's file was not found.
CODE_WITHOUT_PATH_NUDGE = (
    "Your reply has a code block, but no file has changed: it does not say which file it is. To write it, "
    "put the file's path alone on the line before the block:\n"
    "calc.py\n"
    "```python\n...the whole file, or only the functions you change...\n```\n"
    "If the task is done, reply without a code block.")
#: Text tool-call mode: an empty reply in a turn that has changed no file. Measured: on three of
#: nine benchmark tasks Qwen2.5-Coder-1.5B began its reply with `<tool_response>` (then the
#: module's code, line-numbered, as if it were a tool's result), so the stop sequence cut the reply
#: to nothing and the turn ended having changed nothing; told its reply was empty, it wrote the
#: code in a block. Said once per turn.
EMPTY_REPLY_NUDGE = ("Your reply was empty. Write the change now: the file's path on a line of its own, then its "
                     "new text in a ``` code block. If the task is done, say so instead.")
EMPTY_REPLY_CALL_NUDGE = ("Your reply was empty. Write your next tool call now, in the form the system prompt "
                          "shows. If the task is done, say so instead.")
#: Text mode, code blocks read as edits: a reply with no call and no block in a turn that has
#: changed no file, ending with a colon. Measured: on three of the benchmark's retries the model
#: wrote "Here's the updated `median` function:", then `<tool_response>`, which the stop sequence
#: cut; the attempt ended with nothing written. Said once per turn (with EMPTY_REPLY_NUDGE's turn).
ANNOUNCED_CODE_NUDGE = ("Your reply stops before the code it announces, so no file has changed. Write it now: the "
                        "file's path on a line of its own, then its new text in a ``` code block.")
#: A response cut off at the output limit while repeating the same lines (repetition.py): the
#: repetition is left out of the conversation and the model told, once a turn, instead of being
#: asked to continue it.
REPEATING_NUDGE = ("Your last response kept repeating the same lines, so it was cut off; the "
                   "repetition is left out above. Do not continue it. If the change is not written yet, write it "
                   "once: the file's path on a line of its own, then its new text in a ``` code block. If it is, "
                   "say so.")
REPEATING_CALL_NUDGE = ("Your last response kept repeating the same lines, so it was cut off; the "
                        "repetition is left out above. Do not continue it: go on with the task, once.")
#: Before the text of the files the task names, attached to its first message.
ATTACHED_NOTE = "The files named above, as they are now (each path, then its text):"
#: Text tool-call mode with code blocks read as edits: after the attached files, the last words
#: of the first message (Aider ends its message with its edit format too). Measured on the
#: real-model benchmark's first requests (docs/benchmarks.md): Qwen2.5-Coder-1.5B no longer began
#: a reply with `<tool_response>` (5 of 22 tasks before, each an empty reply and a request more),
#: and explained the change before its code block; 6 of 22 tasks passed on the first reply,
#: against 5 without it.
ATTACHED_ANSWER = ("Explain what to change, then give the changed file: its path on a line, then its whole text "
                   "in a ``` block.")
#: After a reply's code blocks were read as edits (codeedits.py): what was written is in the
#: results; what was not, and why.
CODE_EDITS_NOT_WRITTEN = "Some code blocks of your reply were not written to a file: {problems}."
CONTEXT_NUDGE = ("Your last response was cut off: the conversation had filled the model's context window. "
                 "Its earlier part is summarized above now; continue where you stopped.")

#: How the model works with its tools; the shared instructions follow it. Short, since every
#: character is in every request of a small model's prompt (it was 950 characters with the same
#: rules; the real-model benchmark, docs/benchmarks.md).
TOOL_GUIDANCE = """\
You are an autonomous coding agent in a repository: the working directory. Paths are relative to it.
- Read the files that matter before you change them. Make complete, working changes with the file
  tools, in the code's existing style; create only files the task needs.
{shell}
- A tool call that is not permitted comes back as an error that says why: do not repeat it.
- When the work is done, reply without a tool call, with a short summary of what you changed."""

SHELL_GUIDANCE = """\
- Run tests and other programs with the bash tool; change files with the file tools, not shell
  redirections. Validators check your changes after you stop; what they find comes back to you."""

NO_SHELL_GUIDANCE = """\
- There is no shell: you cannot run programs or tests. Validators check your changes after you
  stop; what they find comes back to you."""

READ_ONLY_GUIDANCE = """\
You are a coding agent in a read-only session. You work in a repository: the working directory.

How to work:
- Read, list, glob and grep the files that matter; paths are relative to the working directory.
- Do not change anything: there are no tools that write files{shell}.
- A tool call that is not permitted comes back as an error that says why: do not repeat it.
- When you have the answer, stop calling tools and reply with it."""


def tool_guidance(*, cwd: str, shell: bool, read_only: bool) -> str:
    """The guidance that opens the system prompt. Never the workspace's absolute path: it tells
    the model nothing its tools need (their paths are relative), sends a local path to the
    provider, and makes the prompt (and a cached or seeded answer) depend on where the
    repository lies. (`cwd` is kept for callers; it is not used.)"""
    del cwd
    if read_only:
        return READ_ONLY_GUIDANCE.format(
            shell=" (run only commands that read: the others are refused)" if shell else "")
    return TOOL_GUIDANCE.format(shell=SHELL_GUIDANCE if shell else NO_SHELL_GUIDANCE)
