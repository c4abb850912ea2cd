"""The xdist bridge: the controller's side of its workers. Each gateway is described and
a remote one proves its state against the approval; each worker gets the run it belongs to;
a worker's node ids are checked before the run id is spent; a remote worker's outputs come
back with its reports; a worker's end data is gathered; reports xdist queued before an
interruption are handed on."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

import pytest

from prereg.base.hashing import file_entries, sha256_file
from prereg.decisions import gate, manifest
from prereg.records.runs import contained, item_dir_name
from prereg.runtime import remote
from prereg.runtime.process_run import PROPERTY, PROVED_CHECKOUT, PROVED_SNAPSHOT, WORKER_GATE


def distributed(config: pytest.Config) -> bool:
    """xdist workers collect and run the items; this controller collects none."""
    return config.pluginmanager.has_plugin("dsession")


class XdistBridge:
    """The controller's xdist hooks. The controller provides ``config``, ``run``,
    ``plan``, ``approval``, ``root``, ``layout``, ``snapshot``, ``session``, ``started``,
    ``gateways``, ``workers``, ``collections``, ``worker_data``, ``entries``,
    ``_verify_and_spend``, ``refuse`` and ``_interruption``."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs) -> None:
        """No implicit rsync: xdist would copy pytest into a remote worker's checkout."""
        dsession = config.pluginmanager.getplugin("dsession")
        if any(remote.is_remote(s) for s in specs) and dsession is not None:
            dsession.nodemanager.roots = []
            # A restarted worker would join after the run id is spent: none is restarted.
            dsession._max_worker_restart = 0

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_newgateway(self, gateway) -> None:
        """Describe every gateway; a remote one also proves its state against the approval,
        in the interpreter that then runs the worker, before the run id is spent."""
        spec = gateway.spec
        entry = {
            "id": gateway.id,
            "spec": remote.spec_text(spec),
            "remote": remote.is_remote(spec),
            "problems": [],
        }
        self.gateways[gateway.id] = entry
        try:
            if remote.is_remote(spec):
                kind = self.plan.stage(self.run.stage)["kind"]
                state = remote.run_on_gateway(
                    gateway,
                    remote.PROVE_SOURCE,
                    {
                        "approval_rel": self.approval.path.relative_to(self.root).as_posix(),
                        "approval_sha256": sha256_file(self.approval.path),
                        "stage": self.run.stage,
                        "package": remote.package_files(),
                        "kind": {"name": kind, **remote.kind_file(kind)},
                        "variables": {n: os.environ.get(n) for n in remote.LOADING_VARIABLES},
                        "threads": self.run.threads,
                        **(
                            {"commit": self.snapshot.commit, "tree": self.snapshot.tree}
                            if self.snapshot is not None
                            else {}
                        ),
                    },
                )
            else:
                state = remote.run_on_gateway(gateway, remote.DESCRIBE_SOURCE, list(sys.path))
        except Exception as err:  # noqa: BLE001 -- a worker that cannot prove its state is refused
            state = {"problems": [f"its proof did not run: {manifest.describe(err)}"]}
        entry.update(state)
        if self.started and entry["problems"]:  # joined after spending: the run is void
            self._interruption(str(self._worker_refusals()[-1]))
            self.session.shouldstop = f"worker {gateway.id} could not prove its state"

    def _worker_refusals(self) -> list[gate.Refusal]:
        return [
            gate.Refusal(
                "worker",
                f"worker {e['id']} (--tx {e['spec']}, host {e.get('host', '?')}, checkout "
                f"{e.get('checkout', '?')}): {problem}",
            )
            for e in self.gateways.values()
            for problem in e["problems"]
        ]

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        ship = remote.is_remote(node.gateway.spec)
        node.workerinput[PROPERTY] = asdict(self.run) | {"ship_outputs": ship}
        if ship:
            proved = self.gateways[node.gateway.id]
            node.workerinput[PROVED_CHECKOUT] = proved.get("checkout")
            node.workerinput[PROVED_SNAPSHOT] = (proved.get("snapshot") or {}).get("folder")
        self.workers += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A worker's judgement of its own code, sent ahead of its collection: a problem
        of that worker, refused before the spend."""
        prefix = f"{WORKER_GATE}::"
        if report.failed and report.nodeid.startswith(prefix):
            worker = report.nodeid[len(prefix) :]
            entry = self.gateways.setdefault(worker, {"id": worker, "spec": "?", "problems": []})
            entry["problems"].extend(str(report.longrepr).splitlines())

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        """One barrier before the spend: the run id is spent only once every worker has
        collected, judged its own code and found nothing, and listed the same items in the
        same order (then, before xdist schedules any item)."""
        self.collections[node.gateway.id] = list(ids)
        if self.started or len(self.collections) < self.workers:
            return
        (first, listed), *others = sorted(self.collections.items())
        for worker, theirs in others:
            if theirs != listed:
                how = (
                    "the same items in another order"
                    if sorted(theirs) == sorted(listed)
                    else f"{len(theirs)} items, not the {len(listed)} items"
                )
                self.gateways[worker]["problems"].append(
                    f"it collected {how} than worker {first}: the workers would not run one stage"
                )
        self._verify_and_spend(listed)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        data = getattr(node, "workeroutput", {}).get(PROPERTY)
        if data:
            self.worker_data.append(data)
        if error and not self.started and node.gateway.id not in self.collections:
            self.refuse([gate.Refusal(
                "worker", f"worker {node.gateway.id} went down before it listed its items: {error}"
            )])  # fmt: skip
        if error:
            self._interruption(f"worker {node.gateway.id} went down: {error}")

    def _receive_outputs(self, report: pytest.TestReport, entry: dict) -> None:
        """A remote worker's outputs: written into the item folder, hashed as a local
        worker's are, and compared with the hashes the worker took."""
        chunks = [v for n, v in report.user_properties if n == remote.OUTPUT_PROPERTY]
        if not chunks:
            return
        report.user_properties[:] = [
            p for p in report.user_properties if p[0] != remote.OUTPUT_PROPERTY
        ]
        folder = self.layout.item_dir(item_dir_name(report.nodeid))
        try:
            problems = remote.unpack(chunks, contained(self.root, folder))
            if not problems and file_entries(folder) != entry.get("outputs"):
                problems = ["the outputs written differ from the hashes the worker sent"]
        except Exception as err:  # noqa: BLE001 -- a reason in the manifest; the run goes on
            problems = [manifest.describe(err)]
        if problems:
            entry["record_error"] = f"outputs from worker {entry.get('worker')}: " + "; ".join(
                problems
            )

    def _drain_xdist_events(self, session: pytest.Session) -> None:
        """Hand on the item reports xdist received but did not pass on before an interruption.

        Interrupted, the controller stops reading xdist's event queue, while its workers
        run on until they are stopped (xdist gives them seconds): reports of items that
        finished wait in the queue. So the workers are stopped here, before junit.xml is
        written, and every waiting report goes through ``pytest_runtest_logreport`` as
        usual: each finished item keeps its true outcome (not "not run"), in the manifest
        and in junit.xml, marked ``reported_after_interruption``.
        """
        # queue: only after an interruption (import prereg.plugin does not load it)
        import queue

        dsession = self.config.pluginmanager.getplugin("dsession")
        events = getattr(dsession, "queue", None)
        if events is None:
            return
        if self.interrupted or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            try:
                dsession.nodemanager.teardown_nodes()  # xdist's own shutdown; later a no-op
            except Exception as err:  # noqa: BLE001 -- the reports already queued still count
                self.finish_notes.append(f"stopping the workers failed: {manifest.describe(err)}")
        while True:
            try:
                name, kwargs = events.get_nowait()
            except queue.Empty:
                return
            if name == "testreport":
                report = kwargs["rep"]
                report.node = kwargs["node"]  # as xdist's own handler does
                self.config.hook.pytest_runtest_logreport(report=report)
                self.entries[report.nodeid]["reported_after_interruption"] = True
            elif name in ("workerfinished", "errordown"):
                self.pytest_testnodedown(kwargs["node"], kwargs.get("error"))
