"""A rehearsal of the built-in protocols' stages writes nothing a later run reads: the
RP002A confirmatory-config stage freezes no configuration in the checkout, and an E04 item
keeps its vectors in the rehearsal's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from prereg.e04 import stage as e04_stage
from prereg.e04.plan import grid, settings_of
from prereg.kinds.context import ItemContext
from prereg.kinds.plans import load_plan
from prereg.kinds.stages import RunView
from prereg.rp002a import config_stage

pytestmark = pytest.mark.software

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("rehearsal", [True, False])
def test_a_rehearsed_confirmatory_config_freezes_nothing_in_the_checkout(tmp_path, rehearsal):
    plan = load_plan(REPO / "plans" / "STATISTICAL_PIPELINE_PLAN.json")
    folder = tmp_path / "runs" / "rehearsals" / "confirmatory-config-20261202T000000Z"
    (folder / "items" / "config").mkdir(parents=True)
    (folder / "items" / "config" / config_stage.CONFIG).write_text('{"derived": true}\n')
    (tmp_path / "plans").mkdir()
    view = RunView(
        root=tmp_path,
        run_dir=folder,
        plan=plan,
        stage=config_stage.STAGE,
        items=({"nodeid": "x::test_derive_config", "output_dir": "config"},),
        rehearsal=rehearsal,
    )
    config_stage.summarise(view)
    assert (view.summary_dir / config_stage.CONFIG).read_text() == '{"derived": true}\n'
    frozen = config_stage.output_path(tmp_path, view.settings)
    assert frozen.exists() is not rehearsal, "a run freezes the configuration, a rehearsal not"


def test_a_rehearsed_e04_item_keeps_its_vectors_in_the_rehearsal_folder(tmp_path, monkeypatch):
    plan = load_plan(REPO / "plans" / "demo" / "E04_PLAN.json")
    seen = []

    def workspace_for(root, *args):
        seen.append(root)
        raise LookupError("stop after the workspace is asked for")

    monkeypatch.setattr(e04_stage, "workspace_for", workspace_for)
    folder = tmp_path / "runs" / "rehearsals" / "e04-20261202T000000Z"
    cell = grid(settings_of(plan.data, "e04"), ["T01"])[0]
    for rehearsal in (folder, None):
        context = ItemContext(
            stage="e04", run_id=None, plan=plan.data, outputs=tmp_path / "out",
            seed_namespace="e04", deadline=None, rehearsal=rehearsal,
        )  # fmt: skip
        with pytest.raises(LookupError):
            e04_stage.run_item(context, cell, root=tmp_path, inputs={})
    assert seen == [folder, tmp_path]
    view = RunView(root=tmp_path, run_dir=folder, plan=plan, stage="e04", items=(), rehearsal=True)
    assert view.shared_root == folder
    assert (
        RunView(root=tmp_path, run_dir=folder, plan=plan, stage="e04", items=()).shared_root
        == tmp_path
    )
