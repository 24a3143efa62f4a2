"""``vlgate cache stats|prune``: what the shared record cache holds (docs/record-cache.md), and
pruning it by age or size beyond the bound ``vlgate.yaml`` keeps on every put."""

from __future__ import annotations

import argparse

from vlgate.cli.commands.base import Answer, Command, UserError


class Cache(Command):
    name = "cache"
    help = "show (stats) or prune the shared record cache: records reused by fingerprint across versions, models and runs"
    description = (
        "stats: the record cache vlgate.yaml's record_cache names (a folder under VLGATE_HOME, or the state database's table): "
        "its entries, bytes, bound and oldest and newest use. prune: remove the records last used longer ago than --older-than "
        "(e.g. 30d, 12h), then the least recently used until at most --max-size (e.g. 5GB) remain; prints what was removed. "
        "A pruned record is computed again the next time a run needs it."
    )
    json_help = "the cache's statistics (and, for prune, the entries removed) as one JSON object"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("stats", "prune"))
        parser.add_argument("--older-than", metavar="AGE", help="prune: records last used longer ago than AGE (30d, 12h, 2w)")
        parser.add_argument("--max-size", metavar="SIZE", help="prune: then the least recently used until at most SIZE remain (5GB, 500MB)")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.evaluators.runners.cache import CacheNotWritable, bytes_text, parse_age, parse_size
        from vlgate.flows.context import ServiceContext
        from vlgate.registry_hooks.record_cache import open_record_cache

        if args.action == "stats" and (args.older_than or args.max_size):
            raise UserError("--older-than and --max-size are for prune")
        try:
            older_than = parse_age(args.older_than) if args.older_than else None
            max_bytes = parse_size(args.max_size) if args.max_size else None
        except ValueError as error:
            raise UserError(str(error)) from None
        if args.action == "prune" and older_than is None and max_bytes is None:
            raise UserError("prune: say what to remove (--older-than AGE, --max-size SIZE, or both)")
        context = ServiceContext.open()
        home = context.home
        settings = context.config.record_cache.settings(home)
        cache = open_record_cache(settings, home)
        if cache is None:
            data = {"kind": "off", "entries": 0, "bytes": 0}
            return Answer(data, text=lambda: print("record cache: off (vlgate.yaml record_cache.kind)"))
        try:
            removed = cache.prune(older_than, max_bytes) if args.action == "prune" else None
            if removed is not None and older_than is not None:  # the expectation results kept beside the records (docs/record-cache.md)
                from vlgate.flows.gx_suites import prune_expectation_results

                prune_expectation_results(home, older_than)
        except CacheNotWritable as error:
            raise UserError(str(error)) from None
        except PermissionError as error:
            raise UserError(f"{error.filename}: cannot remove it: {error.strerror} (prune needs write access)") from None
        stats = cache.stats()
        data = stats.model_dump(mode="json") | ({"removed": removed} if removed is not None else {})

        def text() -> None:
            from vlgate.text import visible

            if removed is not None:
                print(f"removed {removed} records")
            bound = f" of {bytes_text(stats.max_bytes)}" if stats.max_bytes is not None else ""
            print(visible(f"record cache ({stats.kind}, {stats.location}): {stats.entries} records, {bytes_text(stats.bytes)}{bound}"))
            if stats.oldest_use is not None and stats.newest_use is not None:
                print(f"last used: oldest {stats.oldest_use:%Y-%m-%d %H:%M} UTC, newest {stats.newest_use:%Y-%m-%d %H:%M} UTC")

        return Answer(data, text=text)
