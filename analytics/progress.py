"""Progress of a long audit, on stderr: each step as it begins, and while Spark works, the
running stages and their tasks every few seconds (Spark's own console bar is off)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EVERY = 5.0  # seconds between two progress lines while a step runs


class Progress:
    """``with Progress(spark) as progress: progress.step("reading the journal") ...``"""

    def __init__(self, spark: SparkSession, out: TextIO | None = None, quiet: bool = False):
        """``out``: where progress goes (None: ``sys.stderr`` as it is now, not as it was when
        this module was imported)."""
        self.tracker = spark.sparkContext.statusTracker()
        self.out = out if out is not None else sys.stderr
        self.quiet = quiet
        self.started = time.monotonic()
        self.current = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="audit-progress", daemon=True)

    def __enter__(self) -> Progress:
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._say(f"done in {self._elapsed()}" if kind is None else "stopped")

    def step(self, name: str) -> None:
        """A new step begins."""
        self.current = name
        self._say(name)

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}:{seconds % 60:02d}"

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(f"[audit {self._elapsed()}] {text}", file=self.out, flush=True)

    def _watch(self) -> None:
        while not self._stop.wait(EVERY):
            stages = []
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is not None:
                    stages.append(
                        f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                    )
            if stages:
                self._say(f"{self.current}: " + ", ".join(stages))
