"""Text from data (a benchmark's questions, a model's answers, names and reasons read back
from MLflow) as a terminal may show it: :func:`visible` writes every character that would
act on the terminal instead of being shown as the escape Python's ``repr`` writes for it.

Escaped: the C0 controls U+0000–U+001F (but those in ``keep``, e.g. the newline of a block
meant to span lines), DEL U+007F, the C1 controls U+0080–U+009F (U+009B alone starts an
escape sequence on some terminals; U+0085 is NEXT LINE), the line and paragraph separators
U+2028 and U+2029 (with U+000A–U+000D, U+001C–U+001E and U+0085, every character that
Python's ``str.splitlines``, JavaScript or a chat client takes for a line break), and the
bidirectional embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069, which
reorder the text after them on screen. So a value shown through :func:`visible` is one line.
Tab, newline and carriage return become ``\\t``, ``\\n``, ``\\r``; the others ``\\xNN``
below U+0100 (ESC is ``\\x1b``, BEL ``\\x07``) and ``\\uNNNN`` above (``\\u202e``). Every
other character is shown as it is: accents, CJK, emoji, and backslashes, which are not
doubled (the rendering is for reading; ``--json`` is the exact form).

:func:`shell_command` writes a command a person is shown to paste (in notifications, error
lines, hints and the report) with every word quoted as a POSIX shell reads it back, so a
model named ``vlm $(echo INJECTED)`` is pasted as that name, never run.

Pure standard library, so every layer may use it.
"""

from __future__ import annotations

import re
import shlex

#: the characters :func:`visible` escapes
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escaped(char: str) -> str:
    """One character as Python's ``repr`` escapes it: ``\\x1b``, ``\\u202e``, ``\\n``."""
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible(text: str, keep: str = "") -> str:
    """``text`` with every control character and bidi override escaped (see the module
    docstring), the characters of ``keep`` (e.g. ``"\\n"``) left as they are."""
    if not UNSAFE.search(text):
        return text
    return UNSAFE.sub(lambda match: match.group() if match.group() in keep else escaped(match.group()), text)


def shell_command(*words: object) -> str:
    """``words`` as one shell command line to paste, each quoted where a POSIX shell would
    otherwise expand, split or run any of it (``shlex.quote``): ``shell_command("vlgate",
    "approve", "vlm $(x)", 3)`` is ``vlgate approve 'vlm $(x)' 3``. Placeholders a person fills
    in (``--reason TEXT``) are appended by the caller, outside."""
    return " ".join(shlex.quote(str(word)) for word in words)
