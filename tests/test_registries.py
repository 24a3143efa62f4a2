"""The one registry type behind the evaluators, the backends and GenCeption's helper models
(``evaluators/registries.py``): entries in the order added, a name once, lazy sources
resolved once on first use, and a source that fails resolved again from the start."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from vlgate.evaluators.registries import Registry


@dataclass(frozen=True)
class Named:
    name: str
    value: int = 0


class UnknownNamed(ValueError):
    pass


def test_entries_keep_their_order_a_name_is_taken_once_and_an_unknown_one_is_named_with_the_rest():
    entries = Registry("widget", lambda entry: entry.name, entries=(Named("b"), Named("a")), unknown=UnknownNamed)
    entries.add(Named("c"))
    assert entries.names() == ("b", "a", "c") and list(entries) == ["b", "a", "c"] and "a" in entries and "z" not in entries
    with pytest.raises(ValueError, match="^widget 'a' is already registered$"):
        entries.add(Named("a", 1))
    with pytest.raises(UnknownNamed, match="^unknown widget 'z'; expected one of b, a, c$"):
        entries.get("z")
    listed_sorted = Registry("widget", lambda entry: entry.name, entries=(Named("b"), Named("a")), sorted_names=True)
    with pytest.raises(ValueError, match="expected one of a, b$"):
        listed_sorted["z"]
    assert entries.replace(Named("a", 2)) == Named("a", 2) and entries.names() == ("b", "c", "a")  # replaced: added after the others
    entries.remove("b")
    entries.remove("b")  # removing what is not there changes nothing
    assert entries.values() == (Named("c"), Named("a", 2)) and entries.find("b") is None


def test_a_check_refuses_an_entry_before_it_is_added():
    def positive(entry: Named) -> None:
        if entry.value < 0:
            raise ValueError(f"{entry.name}: negative")

    entries = Registry("widget", lambda entry: entry.name, on_add=positive)
    with pytest.raises(ValueError, match="n: negative"):
        entries.add(Named("n", -1))
    assert entries.names() == ()


def test_the_sources_are_resolved_once_on_first_use_by_one_thread_while_the_others_wait():
    calls: list[str] = []

    def slow_source():
        calls.append(threading.current_thread().name)
        time.sleep(0.2)
        yield Named("first")
        assert "first" in entries  # a source may ask what the registry holds so far
        yield Named("second")

    entries = Registry("widget", lambda entry: entry.name, entries=(Named("built-in"),), sources=slow_source)
    assert not entries.is_resolved and calls == []  # made: nothing resolved
    seen: list[tuple[str, ...]] = []
    threads = [threading.Thread(target=lambda: seen.append(entries.names())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and entries.is_resolved
    assert seen == [("built-in", "first", "second")] * 4
    assert entries.resolve() is False  # resolved already


def test_a_source_that_fails_leaves_nothing_of_its_entries_and_is_resolved_again_next_time():
    attempts: list[int] = []

    def flaky_source():
        attempts.append(1)
        yield Named("plugin-a")
        if len(attempts) == 1:
            raise ImportError("plugin-b cannot be loaded")
        yield Named("plugin-b")

    entries = Registry("widget", lambda entry: entry.name, entries=(Named("built-in"),), sources=flaky_source)
    with pytest.raises(ImportError, match="plugin-b"):
        entries.names()
    assert not entries.is_resolved
    assert entries.names() == ("built-in", "plugin-a", "plugin-b") and len(attempts) == 2  # not "plugin-a is already registered"


def test_a_swapped_entry_stands_for_the_block_and_the_one_before_comes_back_in_its_place():
    entries = Registry("widget", lambda entry: entry.name, entries=(Named("a"), Named("b")))
    with entries.swapped(Named("a", 9)) as double:
        assert entries.get("a") is double and entries.names() == ("a", "b")
    assert entries.get("a") == Named("a") and entries.names() == ("a", "b")
    with pytest.raises(RuntimeError), entries.swapped(Named("new")):
        raise RuntimeError("the block failed")
    assert entries.names() == ("a", "b")  # a name that was not there is gone again
