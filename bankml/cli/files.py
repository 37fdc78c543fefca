"""The user's files as the commands read them: text that must be UTF-8 (a grammar), JSON (a schema, tools).

Owns the messages a file that cannot be read gets (which file, which line and column, why); the commands print
them. Must not import: the other modules of ``bankml.cli``.
"""

import json


class InputError(ValueError):
    """A file the command cannot read as UTF-8 text: the message says which and why."""


def read_text(path):
    """A file's text; InputError (not a traceback) for a missing file, a directory, unreadable bytes."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(
            f"{path}:{line}:{column}: invalid UTF-8 (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); grammars are UTF-8 text"
        ) from None


def load_json(path):
    """A JSON file's value; ValueError naming the line and column of invalid JSON (OSError where it cannot be
    opened)."""
    with open(path, "rb") as handle:
        try:
            return json.loads(handle.read().decode("utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
