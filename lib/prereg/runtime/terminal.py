"""What a research run writes on the terminal: the report header naming the progress log,
one line per finished item with an ETA, and the summary naming the manifest."""

from __future__ import annotations

import time

import pytest

from prereg.runtime import eta


class TerminalOutput:
    """The controller's terminal hooks. The controller provides ``config``, ``run``,
    ``layout``, ``root``, ``run_dir``, ``entries``, ``expected``, ``started`` and, once the
    manifest is written, ``status`` and ``finish_notes``; ``interrupted`` once a Ctrl-C or
    signal came."""

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        log = self.layout.progress_log.relative_to(self.root)
        return [
            f"prereg: run {self.run.run_id} of stage {self.run.stage}; follow it with tail -f {log}"
        ]

    def _announce_finished(self, entry: dict) -> None:
        """One line per finished item with an ETA (:mod:`prereg.runtime.eta`), on the terminal
        (also under -n 2: the controller writes it) and in the run's progress log."""
        try:
            done = sum(1 for e in self.entries.values() if "outcome" in e)
            line = eta.finished_line(
                nodeid=entry["nodeid"],
                outcome=entry["outcome"],
                seconds=entry["elapsed_seconds"],
                done=done,
                total=max(len(self.expected), done),
                elapsed=time.time() - self.started,
            )
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.ensure_newline()
                if getattr(reporter._tw, "width_of_current_line", 0):  # -n 2's progress dots
                    reporter._tw.line()
                reporter.write_line(line)
            eta.append(self.layout.progress_log, line)
        except Exception:  # noqa: BLE001, S110 -- a progress line never costs the run
            pass

    def say_nothing_spent(self) -> None:
        """Say that an interrupted session spent nothing (pytest gives a session interrupted
        while it starts no terminal summary, so this is said when it unconfigures)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep(
                "=",
                f"prereg: run {self.run.run_id} interrupted before its run id was spent: "
                "nothing spent; run it again with the same approval",
            )

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.started:
            terminalreporter.write_sep("=", f"prereg: run {self.run.run_id} {self.status}")
            for note in self.finish_notes:
                terminalreporter.write_line(f"WARNING: {note}", red=True, bold=True)
            written = self.layout.manifest.is_file()
            terminalreporter.write_line(
                f"manifest: {self.layout.manifest}"
                + ("" if written else " was NOT written (see the warnings above)")
            )
            terminalreporter.write_line(f"progress log: {self.layout.progress_log}")
            terminalreporter.write_line(
                f"audit it: prereg audit {self.run_dir.relative_to(self.root)}"
            )
