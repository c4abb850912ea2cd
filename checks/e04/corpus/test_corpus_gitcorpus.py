import pytest

pytestmark = pytest.mark.software

from prereg.e04.gitcorpus import (
    GitCorpusError,
    file_exists_at,
    first_parent,
    read_blob_at,
    read_tree,
    resolve_commit,
)

ONE = {"a/x.go": "package a\n", "a/notes.md": "v1\n", "b/y.go": "package b\n// v1\n"}
TWO = {"b/y.go": "package b\n// v2\n", "c/z.go": "package c\n", "a/x.go": None}


def test_read_tree_returns_the_revision_not_the_work_tree(make_repo, run_git):
    repo, (first, second) = make_repo([ONE, TWO])
    (repo / "b" / "y.go").write_text("package b\n// dirty\n")  # uncommitted edit
    (repo / "d.go").write_text("package d\n")  # untracked file
    index = repo / ".git" / "index"
    status = run_git(repo, "status", "--porcelain")  # may refresh the index: run it first
    before = (index.read_bytes(), index.stat().st_mtime_ns)

    assert read_tree(repo, first) == {"a/x.go": b"package a\n", "b/y.go": b"package b\n// v1\n"}
    assert read_tree(repo, second) == {"b/y.go": b"package b\n// v2\n", "c/z.go": b"package c\n"}
    assert read_tree(repo, "main~1", suffix=None)["a/notes.md"] == b"v1\n"

    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    assert run_git(repo, "status", "--porcelain") == status
    assert (repo / "b" / "y.go").read_text() == "package b\n// dirty\n"


def test_read_tree_many_files_in_one_batch(make_repo):
    # Contents with newlines, empty files and a blob containing a header-like line.
    files = {f"p{i % 7}/f{i:03d}.go": f"package p\n// {i}\n" * (i % 3) for i in range(300)}
    files["weird.go"] = "x 123 blob 4\n\n\n"
    repo, (commit,) = make_repo([files])
    assert read_tree(repo, commit) == {k: v.encode() for k, v in files.items()}


def test_read_tree_with_a_blob_memo_reads_each_content_once(make_repo, monkeypatch):
    from prereg.e04 import gitcorpus

    repo, (first, second) = make_repo([ONE, TWO])
    asked: list[str] = []
    cat = gitcorpus._cat_blobs
    monkeypatch.setattr(
        gitcorpus, "_cat_blobs", lambda path, objects: asked.extend(objects) or cat(path, objects)
    )
    blobs: dict[str, bytes] = {}
    one = read_tree(repo, first, blobs=blobs)
    two = read_tree(repo, second, blobs=blobs)
    again = read_tree(repo, first, blobs=blobs)
    assert one == again == {"a/x.go": b"package a\n", "b/y.go": b"package b\n// v1\n"}
    assert len(asked) == len(set(asked)) == len(blobs) == 4  # x, y v1, y v2, z
    assert two == read_tree(repo, second)
    assert again["a/x.go"] is one["a/x.go"]  # the same bytes object for the same content


def test_a_replace_ref_in_the_input_repository_does_not_change_what_a_commit_reads(
    make_repo, run_git
):
    """``git replace`` makes git show other content under a blob's id: a corpus read through
    it would differ from the commit the approval bound, and the audit, reading the same way,
    would agree. The commit's own objects are read; replace refs are ignored."""
    repo, (first, _) = make_repo([ONE, TWO])
    honest = read_tree(repo, first)
    (repo.parent / "forged.go").write_text("package a\n// forged\n")
    forged = run_git(repo, "hash-object", "-w", str(repo.parent / "forged.go"))
    original = run_git(repo, "rev-parse", f"{first}:a/x.go")
    run_git(repo, "replace", original, forged)
    assert run_git(repo, "cat-file", "-p", original) == "package a\n// forged"  # git shows it
    assert read_tree(repo, first) == honest
    assert read_tree(repo, first, blobs={}) == honest
    assert read_blob_at(repo, first, "a/x.go") == b"package a\n"


def test_resolve_and_first_parent(make_repo):
    repo, (first, second) = make_repo([ONE, TWO])
    assert resolve_commit(repo, "main") == second
    assert resolve_commit(repo, second[:10]) == second
    assert first_parent(repo, second) == first
    with pytest.raises(GitCorpusError, match=r"has no parent"):
        first_parent(repo, first)


@pytest.mark.parametrize("rev", ["0" * 40, "no-such-branch", "main~5"])
def test_unknown_revision_names_repo_and_revision(make_repo, rev):
    repo, _ = make_repo([ONE])
    with pytest.raises(GitCorpusError) as info:
        resolve_commit(repo, rev)
    assert rev in str(info.value) and str(repo) in str(info.value)


def test_option_like_revision_is_refused(make_repo):
    repo, _ = make_repo([ONE])
    with pytest.raises(GitCorpusError, match="--all"):
        resolve_commit(repo, "--all")


def test_non_repository_paths_are_refused(tmp_path, make_repo):
    with pytest.raises(GitCorpusError, match="not a git repository"):
        read_tree(tmp_path, "HEAD")
    with pytest.raises(GitCorpusError, match="not a directory"):
        resolve_commit(tmp_path / "missing", "HEAD")
    repo, _ = make_repo([ONE])
    with pytest.raises(GitCorpusError, match="not its top directory"):
        read_tree(repo / "a", "HEAD")


def test_file_exists_and_read_blob(make_repo):
    repo, (first, second) = make_repo([ONE, TWO])
    assert file_exists_at(repo, first, "a/x.go")
    assert not file_exists_at(repo, second, "a/x.go")
    assert not file_exists_at(repo, first, "a")  # a directory is not a file
    assert read_blob_at(repo, second, "c/z.go") == b"package c\n"
    with pytest.raises(GitCorpusError, match="a/x.go"):
        read_blob_at(repo, second, "a/x.go")


def test_bare_repository_is_readable(make_repo, run_git, tmp_path):
    repo, (_, second) = make_repo([ONE, TWO])
    bare = tmp_path / "bare.git"
    run_git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    assert read_tree(bare, second) == read_tree(repo, second)
