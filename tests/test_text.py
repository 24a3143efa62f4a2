"""Data text on a terminal (vlgate/text.py, cli/terminal.py): control characters and bidi
overrides are shown as escapes, never acted on, in text answers, rich tables and error
lines; ``--json`` stays the exact text."""

from __future__ import annotations

import io
import json

import pytest

from vlgate.flows.context import ServiceContext
from vlgate.text import visible

CLIPBOARD_WRITE = "\x1b]52;c;aGVsbG8=\x07"
CLEAR_SCREEN = "\x1b[2J"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (CLIPBOARD_WRITE, "\\x1b]52;c;aGVsbG8=\\x07"),  # OSC 52 (a clipboard write), BEL-terminated
        (CLEAR_SCREEN, "\\x1b[2J"),
        ("a\x00b\x08c", "a\\x00b\\x08c"),  # C0
        ("line\rover", "line\\rover"),
        ("tab\there\nnext", "tab\\there\\nnext"),
        ("del\x7f", "del\\x7f"),
        ("\x9b31m c1 \x85", "\\x9b31m c1 \\x85"),  # C1: a one-character CSI, NEL
        ("abc\u202edcba\u202c", "abc\\u202edcba\\u202c"),  # right-to-left override, pop
        ("\u2066isolate\u2069 \u202a\u202b\u202d", "\\u2066isolate\\u2069 \\u202a\\u202b\\u202d"),
        ("café, 日本語, 🙂, a\\x1b, 100 %", "café, 日本語, 🙂, a\\x1b, 100 %"),  # ordinary text as it is
        ("", ""),
    ],
)
def test_visible_escapes_control_characters_and_bidi_overrides_and_nothing_else(text, shown):
    assert visible(text) == shown
    assert visible(shown) == shown  # shown once, the same again


def test_no_character_any_reader_takes_for_a_line_break_survives_visible():
    """Every code point that Python's splitlines (and so JavaScript's and chat clients' line
    breaks: LF, VT, FF, CR, FS, GS, RS, NEL, LS, PS) splits on is escaped: a value shown
    through visible() is one line, whatever it holds."""
    breaks = [chr(code) for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF and len(f"a{chr(code)}b".splitlines()) > 1]
    assert {"\u2028", "\u2029", "\x85", "\x0b", "\x0c"} <= set(breaks)
    for char in breaks:
        assert len(visible(f"a{char}b").splitlines()) == 1, repr(char)
    assert visible("m\u2028FAKE\u2029x") == "m\\u2028FAKE\\u2029x"


def test_visible_keeps_what_it_is_told_to():
    assert visible("one\ntwo\x1b\t", keep="\n") == "one\ntwo\\x1b\\t"


def test_a_text_answer_and_rich_output_under_it_show_escapes_and_keep_rich_styles(capsys):
    from rich.table import Table

    from vlgate.cli.commands.base import Answer
    from vlgate.cli.main import render
    from vlgate.cli.terminal import data_text, terminal_console

    def text() -> None:
        print(f"question: {CLEAR_SCREEN}{CLIPBOARD_WRITE}")
        table = Table()
        table.add_column("name", style="bold")
        table.add_row(data_text(f"[red]m{CLEAR_SCREEN}"))
        table.add_row(f"not given as data {CLEAR_SCREEN}")
        terminal_console(force_terminal=True, width=80).print(table)

    assert render(Answer({"q": CLEAR_SCREEN}, status=3, text=text), as_json=False) == 3
    out = capsys.readouterr().out
    assert "question: \\x1b[2J\\x1b]52;c;aGVsbG8=\\x07" in out and "\x07" not in out
    assert "[red]m\\x1b[2J" in out and "not given as data \\x1b[2J" in out  # no markup; escaped anyway
    # what raw ESC is left is rich's own styling of a terminal: select graphic rendition only
    assert set(out.replace("\x1b[1m", "").replace("\x1b[0m", "").replace("\x1b[3m", "")) & {"\x1b", "\x07"} == set()


def test_a_user_error_line_shows_its_escapes(capsys):
    from vlgate.cli.main import main

    assert main(["score", "lcm-mc", f"/no/such/{CLEAR_SCREEN}{CLIPBOARD_WRITE}.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err == "vlgate score: /no/such/\\x1b[2J\\x1b]52;c;aGVsbG8=\\x07.jsonl: no such file\n"


STATUS = {
    "tracking_uri": "http://mlflow",
    "models": [
        {
            "name": f"m{CLEAR_SCREEN}",
            "champion": None,
            "versions": [
                {
                    "version": "2",
                    "state": "done",
                    "attempts": 1,
                    "crashes": 0,
                    "decision": "rejected",
                    "detail": None,
                    "reasons": [f"lcm-mc/acc[red] vs champion: fell on {CLIPBOARD_WRITE}", "second\u202ereason"],
                }
            ],
        }
    ],
    "notifications": {"ci": {"pending": 1, "failed": 1, "delivered": 3}},
    # a receiver's answer, kept as the row's last error: data, shown escaped
    "failed_deliveries": [{"channel": "ci", "event": "decision-rejected", "attempts": 10, "last_error": f"HTTP 500: {CLEAR_SCREEN}", "created_at": "2026-11-28T04:00:00+00:00"}],
}


def test_status_shows_names_and_reasons_with_their_escapes_and_brackets(monkeypatch, capsys, tmp_path):
    from vlgate.cli import service
    from vlgate.cli.commands import registered
    from vlgate.cli.main import main

    monkeypatch.setattr(registered, "service_context", lambda: ServiceContext(tmp_path))
    monkeypatch.setattr(service, "service_status", lambda *args, **kwargs: STATUS)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "m\\x1b[2J" in out and "second\\u202ereason" in out and "HTTP 500: \\x1b[2J" in out
    # a category in brackets is the reason's text, not rich markup
    assert "lcm-mc/acc[red]" in out

    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == STATUS  # the exact strings, escaped by JSON alone


def test_a_rich_console_escapes_what_it_renders_but_not_its_cursor_moves():
    from rich.control import Control

    from vlgate.cli.terminal import VisibleConsole

    console = VisibleConsole(file=io.StringIO(), force_terminal=True, color_system=None, width=40)
    console.print(f"x{CLEAR_SCREEN}", markup=False)
    console.control(Control.move_to_column(0))
    assert console.file.getvalue() == "x\\x1b[2J\n\x1b[1G"


def test_a_command_to_paste_quotes_each_word_and_leaves_plain_words_as_they_are():
    import shlex

    from vlgate.text import shell_command

    assert shell_command("vlgate", "approve", "vlm", 3) == "vlgate approve vlm 3"
    assert shell_command("vlgate", "approve", "vlm $(echo INJECTED)", "1") == "vlgate approve 'vlm $(echo INJECTED)' 1"
    for name in ("a b", "it's", "x;y", "`t`", "$HOME", "-rf", "", "ü name"):
        assert shlex.split(shell_command("vlgate", "release", name, "2")) == ["vlgate", "release", name, "2"]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "cannot be blank"),
        ("   ", "cannot be blank"),
        ("team/vlm", "'/' or ':'"),
        ("a:b", "'/' or ':'"),
        ("..", "'.' or '..'"),
        ("x" * 257, "at most 256 characters"),
        ("vlm\nFAKE", "cannot hold \\n"),
        ("vlm\u2028FAKE", "cannot hold \\u2028"),
        ("vlm\x1b[31m", "cannot hold \\x1b"),
        ("vlm\u202e", "cannot hold \\u202e"),
    ],
)
def test_a_model_name_vlgate_could_not_show_or_the_registry_would_refuse_is_refused(name, says):
    from vlgate.versions import model_name_problem

    problem = model_name_problem(name)
    assert problem is not None and says in problem and "\n" not in problem


def test_a_model_name_mlflow_takes_and_a_shell_would_expand_is_a_name():
    from vlgate.versions import model_name_problem

    for name in ("vlm $(echo INJECTED)", "world-vlm", "Ünïcode 模型 🙂", "a'b\"c", "x" * 256):
        assert model_name_problem(name) is None
