"""``vlgate make-world``'s progress: a line on stderr as each build phase starts and ends
(with its time), and one as each checkpoint is saved (its ``vlgate_checkpoint.json``
written), printed with ``tqdm.write`` so that the training bars below stay whole.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from vlgate.cli.displays import duration

#: make-world's phases (the manifest's ``seconds`` keys), as its progress names them
BUILD_PHASES = {
    "data": "the evaluation data sets",
    "vlm": "the VLM family (one training run, a checkpoint saved at each step count)",
    "llm": "DeCC's LLM agent",
    "vit": "GenCeption's ViT encoder",
    "clip": "CLIP (contrastive training)",
    "diffusion": "the diffusion pipeline",
}


def describe_phase(phase: str) -> str:
    if phase in BUILD_PHASES:
        return BUILD_PHASES[phase]
    if phase.startswith("vlm_"):  # vlm_FAULT: the family's trained version fine-tuned with one fault
        return f"the {phase.removeprefix('vlm_')} version (the trained one fine-tuned with that fault)"
    return phase


class WorldBuildProgress:
    """``build_world``'s ``on_phase(phase, seconds)``: a line as each phase starts (seconds
    None) and ends, and, while a phase runs, one per checkpoint saved under
    ``out/checkpoints`` (each VLM version of the family's one training run, as it is saved)."""

    CARD = "vlgate_checkpoint.json"

    def __init__(self, out: Path, write: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic, poll_s: float = 1.0):
        self.out, self.clock, self.poll_s = Path(out), clock, poll_s
        self.write = write or _tqdm_write
        self.lock = threading.Lock()
        self.phase: tuple[str, float] | None = None
        self.began: float | None = None
        self.saved: set[Path] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, phase: str, seconds: float | None) -> None:
        with self.lock:
            now = self.clock()
            if seconds is None:
                self.began = self.began if self.began is not None else now
                self.phase = (phase, now)
                self.write(f"make-world: {phase}: {describe_phase(phase)} …")
                return
            self._check_saved()
            self.phase = None
            self.write(f"make-world: {phase} done in {duration(seconds)} ({duration(now - (self.began or now))} in all)")

    def _check_saved(self) -> None:
        """Report the checkpoints saved since the last look (a phase is running)."""
        if self.phase is None:
            return
        for card in sorted(self.out.glob(f"checkpoints/*/{self.CARD}")):
            if card not in self.saved:
                self.saved.add(card)
                name, since = self.phase
                self.write(f"make-world:   saved {card.parent.relative_to(self.out).as_posix()} ({duration(self.clock() - since)} into {name})")

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self.lock:
                try:
                    self._check_saved()
                except OSError:  # a folder removed or written while listed: the next look
                    pass

    def __enter__(self) -> WorldBuildProgress:
        self._thread = threading.Thread(target=self._watch, name="vlgate-make-world-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _tqdm_write(line: str) -> None:
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)
