"""Progress while a run goes: a rich bar with ETA on a terminal, one plain line per result
elsewhere (CI logs)."""

from __future__ import annotations

from types import TracebackType
from typing import cast

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

from equiv.records import ResultRecord
from equiv.run.plan import PlanItem

__all__ = ["Progress"]


def _outcome(record: ResultRecord) -> str:
    comparison = record.comparison
    if comparison.identical:
        return "identical"
    return f"diverged at token {comparison.common_prefix}"


class Progress:
    def __init__(self, console: Console, *, total: int) -> None:
        self.console = console
        self.total = total
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None
        if console.is_terminal:
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("prompts", total=self.total)
        return self

    def update(self, item: PlanItem, record: ResultRecord, done: int, total: int) -> None:
        line = f"[{done}/{total}] {item.key}: {_outcome(record)}"
        if self._bar is not None:
            task = cast(TaskID, self._task)  # added by __enter__ with the bar
            self._bar.update(task, total=total, completed=done, description=item.key)
        else:
            self.console.print(line, highlight=False, markup=False)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
