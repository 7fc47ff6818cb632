"""Fetching the benchmark with real git from local file:// repositories: refs, the recorded commit, the
offline cache for pinned commits, clear errors, and URLs that try to run commands or leak credentials."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.data.dataset import Checkout, check_repo_url, data_file_in, fetch_repository, public_url
from judgebench_flows.data.loading import load_pairs
from tests.conftest import GPT4O_FILE, git, make_repo


@dataclass
class Remote:
    path: Path
    url: str
    first: str  # main's first commit; tags v1 (annotated) and v1-light point here
    feature: str  # the tip of branch "feature"
    main: str  # the tip of main


def commit_file(repo: Path, name: str, text: str, message: str) -> str:
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(text)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo)


@pytest.fixture()
def remote(tmp_path: Path) -> Remote:
    path = tmp_path / "remote" / "bench"
    first = make_repo(path, {"data/a.jsonl": '{"v": 1}\n', "README.md": "fixture\n"}, copy_shared=False)
    git("tag", "-a", "v1", "-m", "release 1", cwd=path)
    git("tag", "v1-light", cwd=path)
    git("checkout", "-q", "-b", "feature", cwd=path)
    feature = commit_file(path, "data/b.jsonl", '{"v": "feature"}\n', "feature")
    git("checkout", "-q", "main", cwd=path)
    main = commit_file(path, "data/a.jsonl", '{"v": 2}\n', "main moves on")
    return Remote(path, f"file://{path}", first, feature, main)


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def head_file(checkout: Checkout, name: str = "data/a.jsonl") -> str:
    return (checkout.path / name).read_text()


# --- refs ----------------------------------------------------------------------------------------------


def test_full_sha(remote: Remote, cache: Path) -> None:
    checkout = fetch_repository(remote.url, remote.first, cache)
    assert checkout.commit == remote.first
    assert git("rev-parse", "HEAD", cwd=checkout.path) == remote.first
    assert head_file(checkout) == '{"v": 1}\n'
    assert checkout.repo_url == remote.url
    assert checkout.path.is_relative_to(cache)


def test_short_sha(remote: Remote, cache: Path) -> None:
    checkout = fetch_repository(remote.url, remote.feature[:10], cache)
    assert checkout.commit == remote.feature
    assert head_file(checkout, "data/b.jsonl") == '{"v": "feature"}\n'


def test_branch(remote: Remote, cache: Path) -> None:
    checkout = fetch_repository(remote.url, "feature", cache)
    assert checkout.commit == remote.feature
    assert (checkout.path / "data" / "b.jsonl").is_file()


@pytest.mark.parametrize("tag", ["v1", "v1-light"])
def test_tag(remote: Remote, cache: Path, tag: str) -> None:
    checkout = fetch_repository(remote.url, tag, cache)
    assert checkout.commit == remote.first  # the commit, not the annotated tag object
    assert head_file(checkout) == '{"v": 1}\n'


def test_default_branch(remote: Remote, cache: Path) -> None:
    checkout = fetch_repository(remote.url, None, cache)
    assert checkout.commit == remote.main
    assert head_file(checkout) == '{"v": 2}\n'


def test_branch_fetch_sees_new_commits(remote: Remote, cache: Path) -> None:
    assert fetch_repository(remote.url, "main", cache).commit == remote.main
    newer = commit_file(remote.path, "data/a.jsonl", '{"v": 3}\n', "newer")
    checkout = fetch_repository(remote.url, "main", cache)
    assert checkout.commit == newer
    assert head_file(checkout) == '{"v": 3}\n'


def test_different_refs_do_not_share_a_checkout(remote: Remote, cache: Path) -> None:
    a = fetch_repository(remote.url, remote.first, cache)
    b = fetch_repository(remote.url, "feature", cache)
    assert a.path != b.path
    assert head_file(a) == '{"v": 1}\n' and (b.path / "data" / "b.jsonl").is_file()


def test_local_path_is_accepted(remote: Remote, cache: Path) -> None:
    checkout = fetch_repository(str(remote.path), remote.first, cache)
    assert checkout.commit == remote.first
    assert checkout.repo_url == str(remote.path.resolve())


# --- the cache -----------------------------------------------------------------------------------------


def test_pinned_sha_is_reused_without_the_network(remote: Remote, cache: Path) -> None:
    first = fetch_repository(remote.url, remote.first, cache)
    marker = first.path / "marker-left-in-the-cache"
    marker.write_text("still here")
    remote.path.rename(remote.path.with_name("gone"))  # the remote no longer exists
    again = fetch_repository(remote.url, remote.first, cache)
    assert again == first
    assert marker.read_text() == "still here"  # the same checkout, not a new clone
    # ...and the remote really is unreachable: anything not pinned now fails.
    with pytest.raises(UserError, match="cannot clone"):
        fetch_repository(remote.url, "main", cache)


def test_a_stale_cache_entry_is_replaced(remote: Remote, cache: Path) -> None:
    """A cached checkout whose HEAD is not the pinned commit (e.g. a user ran git in it) is re-cloned."""
    checkout = fetch_repository(remote.url, remote.first, cache)
    git("commit", "-q", "--allow-empty", "-m", "local edit", cwd=checkout.path)
    assert git("rev-parse", "HEAD", cwd=checkout.path) != remote.first
    again = fetch_repository(remote.url, remote.first, cache)
    assert again.commit == remote.first
    assert git("rev-parse", "HEAD", cwd=again.path) == remote.first
    assert [p.name for p in (cache / "repos").iterdir() if p.name != again.path.name] == []  # no staging left behind


# --- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["no-such-branch", "v999", "0123456789abcdef0123456789abcdef01234567", "deadbee"])
def test_unknown_ref(remote: Remote, cache: Path, ref: str) -> None:
    with pytest.raises(UserError) as err:
        fetch_repository(remote.url, ref, cache)
    hint = f" (its HEAD is {remote.main[:12]}: --ref HEAD judges that)" if len(ref) == 40 else ""
    assert str(err.value) == f"ref '{ref}' not found in {remote.url}{hint}"


@pytest.mark.parametrize("ref", [None, "main", "0123456789abcdef0123456789abcdef01234567"])
def test_missing_repository(tmp_path: Path, cache: Path, ref: str | None) -> None:
    url = f"file://{tmp_path}/no-such-repo.git"
    with pytest.raises(UserError) as err:
        fetch_repository(url, ref, cache)
    message = str(err.value)
    assert message.startswith(f"cannot clone {url}: ")
    assert "\n" not in message


def test_missing_local_path(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(UserError, match="no repository at local path"):
        fetch_repository(str(tmp_path / "nope"), None, cache)


def test_a_copy_of_judgebench_without_git_says_how_to_use_it(tmp_path: Path, cache: Path) -> None:
    """A ZIP download or a shared folder of JudgeBench's files is no repository: one line says the two ways
    to judge it, instead of git's "repository does not exist" for a folder that is there."""
    copy = tmp_path / "JudgeBench"
    (copy / "data").mkdir(parents=True)
    (copy / "data" / "a.jsonl").write_text('{"v": 1}\n')
    with pytest.raises(UserError) as err:
        fetch_repository(str(copy), "0123456789abcdef0123456789abcdef01234567", cache)
    message = str(err.value)
    assert message.startswith(f"--repo-url: '{copy}' is a folder but not a git repository: make it one")
    assert "--ref HEAD" in message and f"--data-path {copy}/data/FILE.jsonl" in message and "\n" not in message
    assert not (cache / "repos").exists() or not any((cache / "repos").iterdir())  # nothing cloned

    git("init", "-q", cwd=copy)  # made one as the message says: its own commit, judged with --ref HEAD
    commit = commit_file(copy, "utils/templates/t.jinja2", "x", "JudgeBench")
    with pytest.raises(UserError, match=rf"not found in .*JudgeBench \(its HEAD is {commit[:12]}: --ref HEAD"):
        fetch_repository(str(copy), "0123456789abcdef0123456789abcdef01234567", cache)
    assert fetch_repository(str(copy), "HEAD", cache).commit == commit


@pytest.mark.parametrize("ref", ["", "  ", "--upload-pack=touch /tmp/x", "-b"])
def test_bad_ref(remote: Remote, cache: Path, ref: str) -> None:
    with pytest.raises(UserError, match="is not a git ref"):
        fetch_repository(remote.url, ref, cache)


@pytest.mark.parametrize(
    "url",
    [
        "ext::sh -c touch% {marker}",
        "ext::sh -c touch%20{marker}",
        "EXT::sh -c touch% {marker}",
        "--upload-pack=touch {marker}",
        "-oProxyCommand=touch {marker}",
        "-u touch {marker}",
        "fd::17",
        "  --upload-pack=touch {marker}",
        "ssh://-oProxyCommand=touch%20{marker}/repo.git",
        "ftp://example.invalid/{marker}",
        "",
    ],
)
def test_dangerous_urls_are_rejected_and_nothing_runs(tmp_path: Path, cache: Path, url: str) -> None:
    marker = tmp_path / "pwned"
    url = url.format(marker=marker)
    with pytest.raises(UserError) as err:
        fetch_repository(url, None, cache)
    assert "\n" not in str(err.value)
    assert not marker.exists()


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/x", "--upload-pack=x", "-oProxyCommand=x"])
def test_check_repo_url_rejects_before_git_runs(url: str) -> None:
    with pytest.raises(UserError, match="--repo-url"):
        check_repo_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/ScalerLab/JudgeBench.git",
        "http://127.0.0.1:8080/x.git",
        "ssh://git@host/x.git",
        "git@github.com:org/repo.git",
        "git://host/x",
    ],
)
def test_check_repo_url_accepts_ordinary_urls(url: str) -> None:
    assert check_repo_url(url) == url


# --- credentials ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "public"),
    [
        ("https://user:secret@127.0.0.1:9/x.git", "https://127.0.0.1:9/x.git"),
        ("https://token-secret@github.com/o/r.git", "https://github.com/o/r.git"),
        ("https://user:p@ss-secret@host/x.git", "https://host/x.git"),
        ("https://github.com/o/r.git", "https://github.com/o/r.git"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),  # a user name, not a secret
        ("/some/local/path", "/some/local/path"),
    ],
)
def test_public_url(url: str, public: str) -> None:
    assert public_url(url) == public


@pytest.mark.parametrize("ref", [None, "main", "0123456789abcdef0123456789abcdef01234567"])
def test_credentials_never_reach_error_messages(cache: Path, ref: str | None) -> None:
    url = "https://user:secret@127.0.0.1:9/x.git"
    with pytest.raises(UserError) as err:
        fetch_repository(url, ref, cache)
    message = str(err.value)
    assert "secret" not in message
    assert "https://127.0.0.1:9/x.git" in message


@pytest.fixture()
def http_remote(remote: Remote) -> Iterator[str]:
    """The fixture repository served over git's "dumb" HTTP protocol by a local HTTP server."""
    bare = remote.path.parent / "bench.git"
    git("clone", "-q", "--bare", str(remote.path), str(bare), cwd=remote.path.parent)
    git("update-server-info", cwd=bare)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(bare.parent))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/bench.git"
    finally:
        server.shutdown()
        server.server_close()


def assert_no_secret_in(cache: Path) -> None:
    files = [path for path in cache.rglob("*") if path.is_file()]
    assert files
    for path in files:
        assert b"secret" not in path.read_bytes(), f"credentials written to {path}"


def test_credentials_are_not_written_into_the_cache_over_http(http_remote: str, remote: Remote, cache: Path) -> None:
    """A real HTTP clone with user:secret@ in the URL (the dumb protocol: the full-clone path)."""
    checkout = fetch_repository(http_remote.replace("http://", "http://user:secret@"), remote.first, cache)
    assert checkout.commit == remote.first
    assert checkout.repo_url == http_remote
    assert_no_secret_in(cache)


@pytest.mark.parametrize("ref", [None, "feature", "v1", "first", "first-short"])
def test_credentials_are_not_written_into_the_cache(
    remote: Remote, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ref: str | None
) -> None:
    """Every clone path, with git's own url.insteadOf routing a credential URL to the fixture repository."""
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "{remote.url}"]\n\tinsteadOf = https://user:secret@git.example.invalid/bench.git\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    ref = {"first": remote.first, "first-short": remote.first[:12]}.get(ref or "", ref)
    checkout = fetch_repository("https://user:secret@git.example.invalid/bench.git", ref, cache)
    assert checkout.commit == {None: remote.main, "feature": remote.feature}.get(ref, remote.first)
    assert checkout.repo_url == "https://git.example.invalid/bench.git"
    assert_no_secret_in(cache)


# --- data files ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a.jsonl", "data/a.jsonl"])
def test_data_file_in(remote: Remote, cache: Path, name: str) -> None:
    checkout = fetch_repository(remote.url, "feature", cache)
    assert data_file_in(checkout, name) == (checkout.path / "data" / "a.jsonl").resolve()


def test_missing_data_file_lists_the_available_ones(remote: Remote, cache: Path) -> None:
    checkout = fetch_repository(remote.url, "feature", cache)
    with pytest.raises(UserError) as err:
        data_file_in(checkout, "c.jsonl")
    message = str(err.value)
    assert "'c.jsonl' not found" in message
    assert "available: a.jsonl, b.jsonl" in message
    assert remote.feature[:12] in message


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "../" * 12 + "etc/passwd",
        "/etc/passwd",
        "data/../../outside.jsonl",
        "escape.jsonl",
        "data",
        ".",
    ],
)
def test_data_file_in_refuses_paths_outside_the_checkout(remote: Remote, cache: Path, name: str) -> None:
    checkout = fetch_repository(remote.url, "feature", cache)
    (checkout.path.parent / "outside.jsonl").write_text("{}\n")
    (checkout.path / "data" / "escape.jsonl").symlink_to(checkout.path.parent / "outside.jsonl")
    with pytest.raises(UserError, match="not found"):
        data_file_in(checkout, name)


# --- the real JudgeBench copy --------------------------------------------------------------------------


def test_real_judgebench_clone(judgebench_repo: tuple[str, str], cache: Path) -> None:
    url, sha = judgebench_repo
    checkout = fetch_repository(url, sha, cache)
    assert checkout.commit == sha
    assert (checkout.path / "utils" / "templates" / "arena_hard_judge_prompt.jinja2").is_file()
    pairs = load_pairs(data_file_in(checkout, GPT4O_FILE)).pairs
    assert len(pairs) == 350


@pytest.mark.parametrize(
    ("failure", "retried"),
    [
        (UserError("cannot clone https://example.org/x.git: Connection reset by peer"), True),
        (UserError("cannot clone https://example.org/x.git: repository 'https://example.org/x.git/' not found"), False),
        (UserError("ref 'v9' not found in https://example.org/x.git"), False),
        (UserError("cannot clone /srv/nowhere: fatal: repository '/srv/nowhere' does not exist"), False),
        (UserError("cannot clone file:///srv/nowhere: fatal: Could not read from remote repository."), False),
        (UserError("cannot clone ssh://git@example.org/x.git: fatal: Could not read from remote repository."), True),
        (OSError("git died"), True),
    ],
)
def test_the_clone_task_retries_passing_failures_only(failure, retried):
    """The fetch task is async (the flow's loop keeps serving calls made ahead while git runs), so Prefect
    calls its retry condition from the loop: it must read the failure without blocking or leaking a
    coroutine."""
    import asyncio

    from prefect.states import Failed

    from judgebench_flows.tasks.fetch import _network_hiccup

    assert asyncio.run(_network_hiccup(None, None, Failed(data=failure))) is retried
