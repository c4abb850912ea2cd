"""Git answers the gate, the ledger and the audit with what the repository's objects
record, not what its configuration, index flags or environment say.

Each attack is performed for real in a scratch repository with plain git (showing that
git itself is fooled), then :mod:`prereg.base.gitrepo` or :mod:`prereg.records.ledger` must see
through it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prereg.base import gitrepo
from prereg.records import ledger

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261130-001"
CLEAN_GIT = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "A",
    "GIT_AUTHOR_EMAIL": "a@example.invalid",
    "GIT_COMMITTER_NAME": "A",
    "GIT_COMMITTER_EMAIL": "a@example.invalid",
}


def plain_git(root: Path, *args: str, data: bytes | None = None) -> bytes:
    """git as an attacker runs it: the repository's own configuration and index in force."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | CLEAN_GIT
    done = subprocess.run(
        ["git", "-C", str(root), *args], input=data, capture_output=True, env=env, check=False
    )
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def scratch(root: Path, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    plain_git(root, "init", "-q")
    for rel, text in (files or {"f.py": "original\n", "sub/g.py": "x = 1\n"}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    plain_git(root, "add", "-A")
    plain_git(root, "commit", "-q", "-m", "first")
    return root


def plain_status(root: Path) -> str:
    return plain_git(root, "status", "--porcelain", "--untracked-files=all").decode()


def loose_path(root: Path, oid: str) -> Path:
    return root / ".git" / "objects" / oid[:2] / oid[2:]


def overwrite_object(root: Path, oid: str, kind: str, data: bytes) -> None:
    """Rewrite the loose object file named ``oid`` with other content under the same name."""
    path = loose_path(root, oid)
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"%s %d\0" % (kind.encode(), len(data)) + data))


# -- the environment and the configuration ---------------------------------------------------


working_trees = st.fixed_dictionaries(
    {},
    optional={
        "edit": st.text("abc\n", max_size=8),  # a tracked file's new text
        "untracked": st.binary(max_size=64),  # a file git does not track yet
        "script": st.binary(max_size=16),  # an untracked executable
        "ignored": st.binary(max_size=16),  # an ignored file (never part of the tree)
        "removed": st.just(True),  # a tracked file deleted
    },
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(change=working_trees)
def test_the_working_tree_id_is_what_git_add_all_would_commit_and_stores_no_untracked_file(
    tmp_path_factory, change
):
    """A rehearsal's tree: equal to ``git add -A`` then ``write-tree`` (on a throwaway index),
    the real index untouched, and the bytes of a file git does not track never stored."""
    root = scratch(tmp_path_factory.mktemp("tree") / "r")
    (root / ".gitignore").write_text("*.log\n")
    if "edit" in change:
        (root / "f.py").write_text(change["edit"])
    if "untracked" in change:
        (root / "data.bin").write_bytes(change["untracked"] + b"untracked")
    if "script" in change:
        (root / "run.sh").write_bytes(change["script"])
        (root / "run.sh").chmod(0o755)
    if "ignored" in change:
        (root / "out.log").write_bytes(change["ignored"])
    if change.get("removed"):
        (root / "sub" / "g.py").unlink()
    index_before = (root / ".git" / "index").read_bytes()
    made = gitrepo.working_tree_id(root)
    assert (root / ".git" / "index").read_bytes() == index_before
    if "untracked" in change:
        blob = gitrepo.object_id("blob", (root / "data.bin").read_bytes())
        assert not loose_path(root, blob).exists(), "an untracked file was stored"
    scratch_index = root / ".git" / "scratch-index"
    env = {"GIT_INDEX_FILE": str(scratch_index)}
    for args in (["read-tree", "HEAD"], ["add", "-A"]):
        subprocess.run(
            ["git", "-C", str(root), *args], env={**os.environ, **CLEAN_GIT, **env}, check=True
        )
    expected = subprocess.run(
        ["git", "-C", str(root), "write-tree"], env={**os.environ, **CLEAN_GIT, **env},
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert made == expected


def test_git_variables_in_the_environment_cannot_point_git_at_another_repository(
    tmp_path, monkeypatch
):
    real = scratch(tmp_path / "real")
    decoy = scratch(tmp_path / "decoy", {"other.py": "decoy\n"})
    (real / "f.py").write_text("edited\n")
    for name, value in {
        "GIT_DIR": decoy / ".git",
        "GIT_WORK_TREE": decoy,
        "GIT_INDEX_FILE": decoy / ".git" / "index",
        "GIT_OBJECT_DIRECTORY": decoy / ".git" / "objects",
    }.items():
        monkeypatch.setenv(name, str(value))
    fooled = subprocess.run(
        ["git", "-C", str(real), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fooled.stdout == ""  # git itself looked at the decoy
    assert gitrepo.head_commit(real) == plain_git(real, "rev-parse", "HEAD").decode().strip()
    assert gitrepo.dirty_paths(real) == ["f.py"]
    assert gitrepo.toplevel(real) == real.resolve()


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_an_index_flag_does_not_hide_an_edited_tracked_file(tmp_path, flag):
    root = scratch(tmp_path / "repo")
    (root / "f.py").write_text("edited\n")
    plain_git(root, "update-index", flag, "f.py")
    assert plain_status(root) == ""  # git says clean
    assert gitrepo.dirty_paths(root) == ["f.py"]


def test_a_clean_filter_does_not_hide_an_edit(tmp_path):
    root = scratch(tmp_path / "repo")
    plain_git(root, "config", "filter.hide.clean", "sed s/EDITED/original/")
    (root / ".git" / "info" / "attributes").write_text("f.py filter=hide\n")
    (root / "f.py").write_text("EDITED\n")
    plain_git(root, "add", "f.py")
    assert plain_status(root) == ""  # the filter made the edit look committed
    assert gitrepo.dirty_paths(root) == ["f.py"]


def test_a_textconv_driver_does_not_change_the_bytes_read_from_a_commit(tmp_path):
    root = scratch(tmp_path / "repo")
    plain_git(root, "config", "diff.hide.textconv", "sed s/original/FORGED/")
    (root / ".git" / "info" / "attributes").write_text("f.py diff=hide\n")
    assert b"FORGED" in plain_git(root, "show", "--textconv", "HEAD:f.py")
    assert gitrepo.show_bytes(root, "HEAD", "f.py") == b"original\n"


def test_an_fsmonitor_hook_claiming_nothing_changed_is_not_asked(tmp_path):
    root = scratch(tmp_path / "repo")
    hook = tmp_path / "fsmonitor"
    hook.write_text('#!/bin/sh\nprintf "token\\0"\n')
    hook.chmod(0o755)
    plain_git(root, "config", "core.fsmonitor", str(hook))
    plain_status(root)  # git records the hook's token in the index
    (root / "sub" / "g.py").write_text("x = 2\n")
    assert plain_status(root) == ""  # the hook said nothing changed
    assert gitrepo.dirty_paths(root) == ["sub/g.py"]


def test_hooks_and_an_external_diff_configured_in_the_repository_never_run(tmp_path):
    root = scratch(tmp_path / "repo")
    witness = tmp_path / "ran"
    script = tmp_path / "tool"
    script.write_text(f"#!/bin/sh\ntouch {witness}\n")
    script.chmod(0o755)
    plain_git(root, "config", "diff.external", str(script))
    plain_git(root, "config", "core.hooksPath", str(tmp_path))
    (tmp_path / "reference-transaction").symlink_to(script)
    ledger.spend(root, RUN, b'{"run_id": "%s"}' % RUN.encode(), single_attempt_stage=None)
    (root / "f.py").write_text("edited\n")
    assert "+edited" in gitrepo.git(root, "diff", "HEAD")
    assert not witness.exists()
    plain_git(root, "update-ref", "refs/heads/probe", "HEAD")
    assert witness.exists()  # plain git runs both


# -- objects read back verified --------------------------------------------------------------


def test_a_replace_ref_over_a_recorded_blob_does_not_forge_the_ledger(tmp_path):
    root = scratch(tmp_path / "repo")
    record = b'{"run_id": "%s", "stage": "toy"}' % RUN.encode()
    ledger.record_manifest(root, RUN, record)
    ref = ledger.manifest_ref(RUN)
    original = plain_git(root, "rev-parse", ref).decode().strip()
    forged = plain_git(root, "hash-object", "-w", "--stdin", data=b'{"forged": true}')
    plain_git(root, "replace", original, forged.decode().strip())
    assert plain_git(root, "cat-file", "blob", ref) == b'{"forged": true}'  # git is fooled
    assert ledger.read(root, ref) == record
    problems = gitrepo.history_problems(root)
    assert len(problems) == 1
    assert f"refs/replace/{original}" in problems[0]
    assert f"git replace -d {original}" in problems[0]


def test_a_recorded_blob_rewritten_in_place_is_an_error_naming_the_ref(tmp_path):
    root = scratch(tmp_path / "repo")
    record = b'{"run_id": "%s"}' % RUN.encode()
    ledger.spend(root, RUN, record, single_attempt_stage="toy")
    ref = ledger.start_ref(RUN)
    oid = plain_git(root, "rev-parse", ref).decode().strip()
    overwrite_object(root, oid, "blob", b'{"run_id": "other"}')
    assert plain_git(root, "cat-file", "blob", ref) == b'{"run_id": "other"}'  # git is fooled
    with pytest.raises(gitrepo.GitError, match=ref) as err:
        ledger.read(root, ref)
    assert oid in str(err.value)
    with pytest.raises(gitrepo.GitError, match=f"object {oid} .* is corrupt"):
        gitrepo.read_object(root, oid)


def test_a_ledger_ref_moved_onto_a_tree_is_an_error_and_a_missing_ref_is_none(tmp_path):
    root = scratch(tmp_path / "repo")
    ref = ledger.start_ref(RUN)
    assert ledger.read(root, ref) is None
    assert not ledger.is_spent(root, RUN)
    tree = plain_git(root, "rev-parse", "HEAD^{tree}").decode().strip()
    plain_git(root, "update-ref", ref, tree)
    with pytest.raises(gitrepo.GitError, match=f"{ref} names a tree"):
        ledger.read(root, ref)


def test_a_tree_rewritten_in_place_to_take_an_edit_is_an_error_not_a_clean_tree(tmp_path):
    root = scratch(tmp_path / "repo")
    tree = plain_git(root, "rev-parse", "HEAD^{tree}").decode().strip()
    (root / "f.py").write_text("edited\n")
    plain_git(root, "add", "f.py")
    edited = plain_git(root, "write-tree").decode().strip()
    forged = plain_git(root, "cat-file", "tree", edited)
    overwrite_object(root, tree, "tree", forged)
    assert plain_git(root, "cat-file", "tree", tree) == forged  # git reads the forgery
    with pytest.raises(gitrepo.GitError, match=f"object {tree} .* is corrupt"):
        gitrepo.dirty_paths(root)
    with pytest.raises(gitrepo.GitError, match=tree):
        gitrepo.show_bytes(root, "HEAD", "f.py")


def test_the_batch_reader_reads_many_objects_from_one_process_and_checks_each(tmp_path):
    root = scratch(tmp_path / "repo")
    head = gitrepo.head_commit(root)
    listing = plain_git(root, "ls-tree", "-r", "-t", "HEAD").decode().splitlines()
    with gitrepo.ObjectReader(root) as objects:
        tree = objects.commit_tree(head)
        assert tree == plain_git(root, "rev-parse", "HEAD^{tree}").decode().strip()
        top = [f"{m} {k} {o}\t{n}" for m, k, o, n in objects.tree_entries(tree)]
        assert top == [line for line in listing if "/" not in line.split("\t")[1]]
        files = objects.tree_files(tree)
        assert files == {
            line.split("\t")[1]: tuple(line.split("\t")[0].split()[::2])
            for line in listing
            if " blob " in line
        }
        for oid in [o for _, o in files.values()] * 50:
            kind, data = objects.read(oid)
            assert kind == "blob" and gitrepo.object_id("blob", data) == oid
        with pytest.raises(gitrepo.MissingObject, match="0" * 40):
            objects.read("0" * 40)
        with pytest.raises(gitrepo.GitError, match="not a full sha1 object id"):
            objects.read("HEAD")
        with pytest.raises(gitrepo.GitError, match=f"{tree} .* is a tree, not a commit"):
            objects.commit_tree(tree)
    blob = files["f.py"][1]
    overwrite_object(root, blob, "blob", b"forged\n")
    with gitrepo.ObjectReader(root) as objects:
        assert objects.read_kind(files["sub/g.py"][1], "blob") == b"x = 1\n"
        with pytest.raises(gitrepo.GitError, match=f"object {blob} .* is corrupt"):
            objects.read(blob)


# -- history ---------------------------------------------------------------------------------


def test_grafts_are_a_history_problem_and_do_not_fake_ancestry(tmp_path):
    root = scratch(tmp_path / "repo")
    assert gitrepo.history_problems(root) == []
    anchor = gitrepo.head_commit(root)
    plain_git(root, "checkout", "-q", "--orphan", "other")
    plain_git(root, "commit", "-q", "-m", "unrelated")
    head = gitrepo.head_commit(root)
    assert not gitrepo.is_ancestor(root, anchor, head)
    grafts = root / ".git" / "info" / "grafts"
    grafts.write_text(f"{head} {anchor}\n")
    plain_git(root, "merge-base", "--is-ancestor", anchor, head)  # git is fooled (exit 0)
    assert not gitrepo.is_ancestor(root, anchor, head)
    assert gitrepo.changed_between(root, anchor, head) == []
    problems = gitrepo.history_problems(root)
    assert len(problems) == 1 and str(grafts) in problems[0] and "delete" in problems[0]


def test_a_shallow_clone_is_a_history_problem(tmp_path):
    source = scratch(tmp_path / "source")
    (source / "f.py").write_text("second\n")
    plain_git(source, "commit", "-q", "-am", "second")
    shallow = tmp_path / "shallow"
    plain_git(tmp_path, "clone", "-q", "--depth", "1", source.as_uri(), str(shallow))
    problems = gitrepo.history_problems(shallow)
    assert len(problems) == 1 and "shallow" in problems[0]
    assert "git fetch --unshallow" in problems[0]
    first = plain_git(source, "rev-parse", "HEAD~1").decode().strip()
    assert gitrepo.is_ancestor(shallow, "HEAD", "HEAD")
    assert not gitrepo.is_ancestor(shallow, first, "HEAD")


def test_ancestry_changes_and_committed_bytes_agree_with_plain_git(tmp_path):
    root = scratch(tmp_path / "repo")
    first = gitrepo.head_commit(root)
    (root / "f.py").write_text("second\n")
    (root / "sub" / "g.py").rename(root / "moved.py")
    (root / "deep" / "er").mkdir(parents=True)
    (root / "deep" / "er" / "h.py").write_text("h\n")
    plain_git(root, "add", "-A")
    plain_git(root, "commit", "-q", "-m", "second")
    second = gitrepo.head_commit(root)
    assert gitrepo.is_ancestor(root, first, second) and not gitrepo.is_ancestor(root, second, first)
    changed = plain_git(root, "diff", "--no-renames", "--name-only", first, second).decode()
    assert gitrepo.changed_between(root, first, second) == sorted(changed.split())
    assert gitrepo.show_bytes(root, first, "sub/g.py") == b"x = 1\n"
    assert gitrepo.show_bytes(root, second, "deep/er/h.py") == b"h\n"
    for missing in ("sub/g.py", "deep", "deep/er/h.py/x", "nothing"):
        with pytest.raises(gitrepo.GitError, match="does not exist at commit"):
            gitrepo.show_bytes(root, second, missing)
    assert gitrepo.commit_exists(root, first) and not gitrepo.commit_exists(root, "f" * 40)


# -- the working tree ------------------------------------------------------------------------


def test_dirty_paths_names_every_kind_of_change_git_status_names(tmp_path):
    root = scratch(
        tmp_path / "repo",
        {
            "f.py": "f\n",
            "run.sh": "echo\n",
            "gone.py": "g\n",
            "staged.py": "s\n",
            "lib/a.py": "a\n",
            ".gitignore": "ignored/\n",
        },
    )
    assert gitrepo.dirty_paths(root) == []
    (root / "f.py").write_text("edited\n")
    (root / "run.sh").chmod(0o755)
    (root / "gone.py").unlink()
    (root / "staged.py").write_text("staged\n")
    plain_git(root, "add", "staged.py")
    (root / "staged.py").write_text("s\n")  # back as committed, but the index holds an edit
    (root / "new.py").write_text("new\n")
    (root / "added.py").write_text("added\n")
    plain_git(root, "add", "added.py")
    (root / "ignored").mkdir()
    (root / "ignored" / "x.py").write_text("x\n")
    (root / "lib" / "a.py").unlink()
    (root / "lib").rmdir()
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "a.py").write_text("a\n")
    (root / "lib").symlink_to(root / "elsewhere")
    expected = ["added.py", "elsewhere/a.py", "f.py", "gone.py", "lib", "lib/a.py", "new.py"]
    expected += ["run.sh", "staged.py"]
    assert gitrepo.dirty_paths(root) == expected
    named = {line[3:] for line in plain_status(root).splitlines()}
    assert named <= set(expected)


def test_dirty_paths_in_a_repository_without_a_commit_lists_its_files(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    plain_git(root, "init", "-q")
    assert gitrepo.dirty_paths(root) == []
    (root / "a.py").write_text("a\n")
    assert gitrepo.dirty_paths(root) == ["a.py"]
    with pytest.raises(gitrepo.GitError, match="HEAD"):
        gitrepo.head_commit(root)


# -- the tree parser -------------------------------------------------------------------------

NAMES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0\n"),
    min_size=1,
    max_size=12,
).filter(lambda n: n not in (".", "..") and n.lower() != ".git")
KINDS = {"100644": "blob", "100755": "blob", "120000": "blob", "040000": "tree", "160000": "commit"}
ENTRIES = st.dictionaries(
    NAMES,
    st.tuples(st.sampled_from(sorted(KINDS)), st.binary(min_size=20, max_size=20)),
    max_size=8,
)


def raw_tree(entries: list[tuple[str, bytes, bytes]]) -> bytes:
    return b"".join(mode.lstrip("0").encode() + b" " + n + b"\0" + i for mode, n, i in entries)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries=ENTRIES)
def test_tree_entries_round_trip_with_a_tree_git_mktree_wrote(tmp_path_factory, entries):
    root = tmp_path_factory.mktemp("mktree")
    plain_git(root, "init", "-q")
    listing = "".join(
        f"{mode} {KINDS[mode]} {oid.hex()}\t{name}\0" for name, (mode, oid) in entries.items()
    )
    tree = plain_git(root, "mktree", "-z", "--missing", data=listing.encode()).decode().strip()
    with gitrepo.ObjectReader(root) as objects:
        parsed = objects.tree_entries(tree)
    expected = {(mode, KINDS[mode], oid.hex(), name) for name, (mode, oid) in entries.items()}
    assert set(parsed) == expected and len(parsed) == len(expected)


@given(entries=ENTRIES, cut=st.integers(min_value=1, max_value=20))
def test_tree_parser_keeps_order_and_refuses_cut_short_trees(entries, cut):
    items = [(mode, name.encode(), oid) for name, (mode, oid) in entries.items()]
    data = raw_tree(items)
    parsed = gitrepo.parse_tree(data)
    assert parsed == [(m, KINDS[m], i.hex(), n.decode()) for m, n, i in items]
    if data:
        with pytest.raises(gitrepo.GitError, match="malformed tree"):
            gitrepo.parse_tree(data[:-cut])


@given(
    name=st.sampled_from([b"", b".", b"..", b".git", b".GIT", b"a/b", b"../x"]),
    before=ENTRIES,
)
def test_tree_parser_refuses_names_that_leave_or_shadow_a_folder(name, before):
    items = [(mode, n.encode(), oid) for n, (mode, oid) in before.items()]
    with pytest.raises(gitrepo.GitError, match="unsafe or repeated entry name"):
        gitrepo.parse_tree(raw_tree([*items, ("100644", name, bytes(20))]))
    if items:
        with pytest.raises(gitrepo.GitError, match="unsafe or repeated entry name"):
            gitrepo.parse_tree(raw_tree([*items, items[0]]))


def test_tree_parser_refuses_unknown_modes():
    for mode in (b"040000", b"100664", b"777", b"x"):
        with pytest.raises(gitrepo.GitError, match="unknown mode"):
            gitrepo.parse_tree(mode + b" a\0" + bytes(20))


def test_the_user_s_name_comes_from_their_global_configuration_and_nothing_else_does(
    tmp_path, monkeypatch
):
    root = scratch(tmp_path / "repo")
    user = tmp_path / "gitconfig"
    user.write_text("[user]\n\tname = Global Name\n[core]\n\thooksPath = /elsewhere\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(user))
    assert gitrepo.user_name(root) == "Global Name"
    assert gitrepo.git(root, "config", "--get", "user.name", check=False) == ""
    assert gitrepo.git(root, "config", "--get", "core.hooksPath") == "/dev/null\n"
    plain_git(root, "config", "user.name", "Local Name")
    assert gitrepo.user_name(root) == "Local Name"


def test_object_ids_are_git_s(tmp_path):
    root = scratch(tmp_path / "repo")
    data = b"some bytes\n"
    assert gitrepo.object_id("blob", data) == hashlib.sha1(b"blob 11\0" + data).hexdigest()
    assert (
        gitrepo.object_id("blob", data)
        == plain_git(root, "hash-object", "--stdin", data=data).decode().strip()
    )


def test_a_replace_ref_is_refused_at_the_gate_and_found_by_the_audit(tmp_path):
    """``git replace`` over the approval commit: refused before spending (git-history); a
    replace ref made after a complete run is a finding of its audit."""
    from support.toy import make_toy_repo

    toy = make_toy_repo(tmp_path / "toy")
    toy.approve("toy", RUN)
    head = toy.git("rev-parse", "HEAD").strip()
    parent = toy.git("rev-parse", "HEAD~1").strip()
    toy.git("replace", head, parent)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "[git-history]" in done.stderr and "git replace -d" in done.stderr, done.stderr
    assert not ledger.is_spent(toy.root, RUN)
    toy.git("replace", "-d", head)
    assert toy.pytest("--research-stage=toy").returncode == 0
    assert toy.audit(RUN).returncode == 0
    toy.git("replace", head, parent)
    audit = toy.audit(RUN)
    assert audit.returncode == 1 and "history cannot be trusted" in audit.stdout, audit.stdout


def test_a_run_stays_auditable_after_its_branch_is_deleted_and_git_collects_garbage(tmp_path):
    """A squash-merge workflow deletes the branch a run was approved on; git gc then drops
    the source commit unless something keeps it: the ledger pins it per run."""
    from support.toy import make_toy_repo

    toy = make_toy_repo(tmp_path / "toy")
    main = toy.git("rev-parse", "--abbrev-ref", "HEAD").strip()
    toy.git("checkout", "-q", "-b", "experiment")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    source = toy.manifest(RUN)["source_commit"]
    assert ledger.pinned_source(toy.root, RUN) == source
    toy.git("checkout", "-q", main)
    toy.git("branch", "-q", "-D", "experiment")
    toy.git("reflog", "expire", "--expire=now", "--all")
    toy.git("gc", "-q", "--prune=now")
    assert toy.git("cat-file", "-t", source).strip() == "commit"
    audit = toy.audit(RUN)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_a_pinned_source_that_is_not_the_runs_is_a_finding(tmp_path):
    from support.toy import make_toy_repo

    toy = make_toy_repo(tmp_path / "toy")
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    other = toy.git("rev-parse", "HEAD~1").strip()
    toy.git("update-ref", ledger.source_ref(RUN), other)
    audit = toy.audit(RUN)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert f"git pins commit {other} as the run's source" in audit.stdout, audit.stdout


def test_the_object_format_of_a_repository_made_anew_in_the_same_folder_is_asked_again(tmp_path):
    # A process asks git a repository's hash function once; a sha1 repository replaced by a
    # sha256 one in the same folder must not be read with sha1 object ids.
    plain_git(tmp_path, "init", "-q", "--object-format=sha1")
    assert gitrepo.object_format(tmp_path) == "sha1"
    assert gitrepo.object_format(tmp_path) == "sha1"
    subprocess.run(["rm", "-rf", str(tmp_path / ".git")], check=True)
    plain_git(tmp_path, "init", "-q", "--object-format=sha256")
    assert gitrepo.object_format(tmp_path) == "sha256"
