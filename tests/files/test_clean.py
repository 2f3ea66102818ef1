"""`res clean` (reconciler/ops/clean.py): the pure selection with literals, then real trees in tmp_path
(never the real /tmp): stale and fresh entries, symlinks out of the root, live sessions (real
processes), files changing during the sweep, directories swapped for symlinks, dry runs."""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.ops import clean as C
from reconciler.ops import failedunits
from reconciler.core import clean as rules
from reconciler.render import clean as text
from reconciler.ops.clean import LITTER, PROJECT, SCRATCH, Entry, Live, Root

NOW = 1_780_000_000.0
H = 3600.0
UID = 1000
SCR = "/tmp/claude-1000"


def ent(rel, newest, *, root=SCR, root_kind=SCRATCH, kind="dir", size=4096, owner=UID, **kw) -> Entry:
    rel = tuple(rel.split("/"))
    return Entry(path=os.path.join(root, *rel), rel=rel, root=root, root_kind=root_kind, kind=kind, size=size,
                 newest=newest, owner=owner, **kw)


def chosen(entries, now=NOW, uid=UID, scratch_s=2 * H):
    return {r.entry.path: text.removal_reason(r) for r in C.select(entries, now, uid, scratch_s)}


# ---------------------------------------------------------------------------------------- pure tier

def test_stale_scratch_goes_fresh_stays():
    got = chosen([ent("-home-u-old", NOW - 5 * H), ent("-home-u-new", NOW - 1 * H), ent("cwd-ab12", NOW - 3 * H, kind="file")])
    assert got == {
        f"{SCR}/-home-u-old": "stale scratch, untouched 5h",
        f"{SCR}/cwd-ab12": "stale scratch, untouched 3h",
    }


def test_staleness_boundary_is_strict():
    assert chosen([ent("a", NOW - 2 * H)]) == {}
    assert list(chosen([ent("a", NOW - 2 * H - 1)])) == [f"{SCR}/a"]


def test_live_other_owner_and_hazard_are_kept():
    got = chosen([
        ent("live", NOW - 9 * H, live=True),
        ent("theirs", NOW - 9 * H, owner=1001),
        ent("sock", NOW - 9 * H, hazard="holds a socket, FIFO or device"),
        ent("mnt", NOW - 9 * H, hazard="a mount point"),
    ])
    assert got == {}


def test_children_of_a_fresh_project_dir_go_one_by_one():
    entries = [
        ent("-home-u-p", NOW - 60),  # fresh because of the new session below
        ent("-home-u-p/old-session", NOW - 30 * H),
        ent("-home-u-p/new-session", NOW - 60),
        ent("-home-u-p/tasks", NOW - 4 * H),
    ]
    assert chosen(entries) == {
        f"{SCR}/-home-u-p/old-session": "stale scratch, untouched 30h",
        f"{SCR}/-home-u-p/tasks": "stale scratch, untouched 4h",
    }


def test_nothing_goes_under_a_live_project_dir():
    entries = [ent("-home-u-p", NOW - 60, live=True), ent("-home-u-p/old-session", NOW - 30 * H)]
    assert chosen(entries) == {}


def test_child_of_a_stale_parent_is_not_listed_twice():
    entries = [ent("p", NOW - 9 * H), ent("p/a", NOW - 9 * H), ent("p/b", NOW - 10 * H)]
    assert list(chosen(entries)) == [f"{SCR}/p"]


def test_child_without_its_parent_seen_is_kept():
    assert chosen([ent("p/a", NOW - 9 * H)]) == {}


def test_litter_rules():
    L = dict(root="/tmp", root_kind=LITTER)
    got = chosen([
        ent("tmp.Ab3dE5fG7h", NOW - 9 * H, empty=True, **L),
        ent("fresh-empty", NOW - 60, empty=True, **L),
        ent("full", NOW - 9 * H, empty=False, **L),
        ent("cwd-of-someone", NOW - 9 * H, empty=True, live=True, **L),
        ent(".X11-unix", NOW - 9 * H, empty=True, **L),
        ent("claude-1000", NOW - 9 * H, empty=True, **L),
        ent("theirs", NOW - 9 * H, empty=True, owner=0, **L),
        ent("dead.pid", NOW - 9 * H, kind="file", pid=4242, pid_alive=False, **L),
        ent("alive.pid", NOW - 9 * H, kind="file", pid=1, pid_alive=True, **L),
        ent("garbage.pid", NOW - 9 * H, kind="file", pid=None, **L),
        ent("new-dead.pid", NOW - 60, kind="file", pid=4243, pid_alive=False, **L),
        ent("notes.txt", NOW - 99 * H, kind="file", **L),
        ent("link", NOW - 99 * H, kind="link", **L),
    ])
    assert got == {
        "/tmp/tmp.Ab3dE5fG7h": "empty directory, untouched 9h",
        "/tmp/dead.pid": "pid file of dead pid 4242, untouched 9h",
    }


def test_project_pattern_entries():
    P = dict(root="/home/u/p", root_kind=PROJECT, pattern="build/")
    got = chosen([ent("build", NOW - 5 * H, **P), ent("sub/build", NOW - 60, **P), ent("x/build", NOW - 5 * H, live=True, **P)])
    assert got == {"/home/u/p/build": "project pattern 'build/', untouched 5h"}


def test_nested_project_matches_listed_once():
    P = dict(root="/home/u/p", root_kind=PROJECT)
    got = chosen([ent("build", NOW - 5 * H, pattern="build/", **P), ent("build/cache", NOW - 5 * H, pattern="build/cache/", **P)])
    assert list(got) == ["/home/u/p/build"]


def test_slug():
    assert C.slug("/home/u/my.proj") == "-home-u-my-proj"
    assert C.slug("/srv/a b_c") == "-srv-a-b-c"


def test_due():
    assert rules.due(None, NOW, 600)
    assert not rules.due(NOW - 599, NOW, 600)
    assert rules.due(NOW - 600, NOW, 600)
    assert rules.due(NOW + 60, NOW, 600)  # the clock went back: run
    assert not rules.due(NOW - 10, NOW, every_s=30)


def test_fmt_bytes_and_show():
    assert text.fmt_bytes(int(1.2 * 1024**3)) == "1.2 GB"
    assert text.fmt_bytes(5 * 1024**2) == "5.0 MB"
    assert text.fmt_bytes(4096) == "4 KB"
    assert C.show("/tmp/a\nb") == "/tmp/a\\x0ab"


def test_render_plan_and_outcomes():
    a = ent("a", NOW - 5 * H, size=int(1.5 * 1024**3))
    b = ent("b", NOW - 3 * H, size=2 * 1024**2, kind="file")
    lines = C.render_plan(C.select([a, b], NOW, UID, 2 * H))
    assert lines == [
        f"would free 1.5 GB: {SCR}/a (stale scratch, untouched 5h)",
        f"would free 2.0 MB: {SCR}/b (stale scratch, untouched 3h)",
        "would free 1.5 GB in 2 entries; res clean --yes removes them",
    ]
    assert C.render_plan([]) == ["nothing to clean"]
    outs = [C.Outcome(a, True, a.size, ""), C.Outcome(b, False, 0, "changed during the sweep")]
    assert C.render_outcomes(outs) == [f"freed 1.5 GB: {SCR}/a", f"kept {SCR}/b: changed during the sweep",
                                       "freed 1.5 GB in total"]


def test_parse_patterns():
    text = "# scratch of this project\n\nbuild/\n*.log\nout/tmp-*\n/etc\n../x\na/**/b\n*\n*/x\n.git\n.res-clean\nnode_modules/.cache/\n"
    from reconciler.render.clean import pattern_error

    pats, refused = C.parse_patterns(text)
    errs = [pattern_error("p/.res-clean", e) for e in refused]
    assert pats == ["build/", "*.log", "out/tmp-*", "node_modules/.cache/"]
    assert errs == [
        "p/.res-clean:6: /etc: must be relative to the project",
        "p/.res-clean:7: ../x: empty, '.' or '..' names are not allowed",
        "p/.res-clean:8: a/**/b: '**' is not supported",
        "p/.res-clean:9: *: the first name must not be only wildcards",
        "p/.res-clean:10: */x: the first name must not be only wildcards",
        "p/.res-clean:11: .git: may not name .git or the pattern file",
        "p/.res-clean:12: .res-clean: may not name .git or the pattern file",
    ]


def test_reset_failed_hook():
    calls = []

    async def list_failed():
        return ["res-r-3.service", "res-claude-77.scope", "other.service", "res-x.socket", "resolved.service"]

    async def reset(name):
        calls.append(name)
        if name == "res-r-3.service":
            raise RuntimeError("NoSuchUnit")

    assert asyncio.run(failedunits.reset_failed(list_failed, reset, yes=False)) == [
        "would reset failed unit res-claude-77.scope", "would reset failed unit res-r-3.service"]
    assert calls == []
    assert asyncio.run(failedunits.reset_failed(list_failed, reset, yes=True)) == [
        "reset failed unit res-claude-77.scope", "kept failed unit res-r-3.service: NoSuchUnit"]
    assert calls == ["res-claude-77.scope", "res-r-3.service"]

    async def broken():
        raise ConnectionError("bus gone")

    assert asyncio.run(failedunits.reset_failed(broken, reset, yes=True)) == ["reset-failed skipped: bus gone"]


# ---------------------------------------------------------------------------------------- real trees

ME = os.getuid()
NOLIVE = Live()


def age(path: Path, hours: float, now: float) -> None:
    t = now - hours * H
    os.utime(path, (t, t), follow_symlinks=False)


def age_tree(path: Path, hours: float, now: float) -> None:
    """Every entry of the tree (children first, so the directories keep the age too)."""
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for n in filenames + dirnames:
            age(Path(dirpath) / n, hours, now)
    age(path, hours, now)


def write(path: Path, data: bytes = b"x" * 10000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def tree(tmp_path):
    """A scratch root like /tmp/claude-<uid>/ with a stale project, a fresh one, nested stale dirs,
    a symlink pointing outside and a stale cwd- file; plus the outside target."""
    now = time.time()
    root = tmp_path / f"claude-{ME}"
    outside = tmp_path / "outside"
    write(outside / "precious.txt", b"keep me")
    write(root / "-home-u-old" / "s1" / "scratchpad" / "big.bin", b"\0" * 200_000)
    write(root / "-home-u-old" / "tasks" / "b1.output")
    write(root / "-home-u-old" / "a" / "b" / "c" / "d" / "deep.txt")
    (root / "-home-u-old" / "link-out").symlink_to(outside)
    (root / "-home-u-old" / "a" / "file-link").symlink_to(outside / "precious.txt")
    write(root / "-home-u-new" / "s2" / "scratchpad" / "x.txt")
    write(root / "cwd-0a1b")
    (root / "top-link").symlink_to(outside)
    age_tree(root / "-home-u-old", 5, now)
    age_tree(root / "-home-u-new", 0.1, now)
    age(root / "cwd-0a1b", 3, now)
    age(root / "top-link", 3, now)
    return root, outside, now


def run(root, now, yes, live=NOLIVE, **kw):
    return C.clean([Root(str(root), SCRATCH)], now, ME, 2 * H, yes=yes, live=live, **kw)


def test_dry_run_lists_and_deletes_nothing(tree):
    root, outside, now = tree
    before = sorted(str(p) for p in root.rglob("*"))
    lines = run(root, now, yes=False)
    assert sorted(str(p) for p in root.rglob("*")) == before
    paths = [line.split(": ", 1)[1].rsplit(" (", 1)[0] for line in lines[:-1]]
    assert paths == [f"{root}/-home-u-old", f"{root}/cwd-0a1b", f"{root}/top-link"]
    assert all(line.startswith("would free ") for line in lines)
    assert lines[-1].endswith("entries; res clean --yes removes them")


def test_yes_removes_stale_keeps_fresh_and_symlink_targets(tree):
    root, outside, now = tree
    lines = run(root, now, yes=True)
    assert not (root / "-home-u-old").exists()
    assert not os.path.lexists(root / "top-link") and not (root / "cwd-0a1b").exists()
    assert (root / "-home-u-new" / "s2" / "scratchpad" / "x.txt").exists()
    assert (outside / "precious.txt").read_bytes() == b"keep me"  # links went as links
    assert lines[0].startswith("freed ") and lines[0].endswith(f": {root}/-home-u-old")
    size, unit = lines[0].split()[1:3]
    assert unit == "KB:" and float(size) >= 190  # the 200 kB file and the rest
    assert lines[-1].startswith("freed ") and lines[-1].endswith(" in total")


def test_freed_line_in_gb(tmp_path):
    now = time.time()
    root = tmp_path / "scr"
    big = root / "-home-u-x" / "big.bin"
    big.parent.mkdir(parents=True)
    vfs = os.statvfs(big.parent)
    if vfs.f_bavail * vfs.f_frsize < 4 * 1024**3:
        pytest.skip("less than 4 GB free here")
    with open(big, "wb") as f:  # 1.2 GiB on disk; tmpfs and ext4 allocate it
        try:
            os.posix_fallocate(f.fileno(), 0, int(1.2 * 1024**3))
        except OSError:
            pytest.skip("no room to allocate 1.2 GB here")
    age_tree(root / "-home-u-x", 3, now)
    try:
        lines = run(root, now, yes=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert lines == [f"freed 1.2 GB: {root}/-home-u-x"]


def test_nested_stale_dirs_in_a_fresh_project_go_one_by_one(tree):
    root, outside, now = tree
    write(root / "-home-u-new" / "old-session" / "scratchpad" / "y" / "z.txt")
    age_tree(root / "-home-u-new" / "old-session", 30, now)
    age(root / "-home-u-new", 0.1, now)
    run(root, now, yes=True)
    assert not (root / "-home-u-new" / "old-session").exists()
    assert (root / "-home-u-new" / "s2" / "scratchpad" / "x.txt").exists()


def test_fresh_file_deep_inside_keeps_its_whole_second_level_entry(tree):
    """-home-u-old is fresh now, so it is looked into: a/ (holding the fresh file) stays whole, its
    stale siblings go."""
    root, outside, now = tree
    os.utime(root / "-home-u-old" / "a" / "b" / "c" / "d" / "deep.txt")  # now
    assert run(root, now, yes=True)[-1].startswith("freed")
    assert (root / "-home-u-old" / "a" / "b" / "c" / "d" / "deep.txt").exists()
    assert (root / "-home-u-old" / "a" / "file-link").is_symlink()
    assert sorted(p.name for p in (root / "-home-u-old").iterdir()) == ["a"]


def test_live_session_directory_is_kept(tree):
    """A real process whose cwd is inside a stale session directory (an agent's shell in its scratchpad)."""
    root, outside, now = tree
    cwd = root / "-home-u-old" / "s1" / "scratchpad"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=cwd)
    try:
        live = C.live_processes([str(root)])
        assert str(cwd) in live.paths
        lines = run(root, now, yes=True, live=live)
    finally:
        proc.kill()
        proc.wait()
    assert (cwd / "big.bin").exists()
    assert not any(str(root / "-home-u-old") in line for line in lines)  # not even partly


def test_live_claude_project_is_kept_by_its_slug(tmp_path, tree):
    """A real process named `claude` (a copy of sleep) working in a project: the project's slug
    directory stays though it is stale; nothing under it goes either."""
    root, outside, now = tree
    project = tmp_path / "work" / "my.proj"
    project.mkdir(parents=True)
    write(root / C.slug(str(project)) / "sess" / "scratchpad" / "f.txt")
    age_tree(root / C.slug(str(project)), 9, now)
    exe = tmp_path / "bin" / "claude"
    exe.parent.mkdir()
    shutil.copy(shutil.which("sleep"), exe)
    proc = subprocess.Popen([str(exe), "60"], cwd=project)
    try:
        deadline = time.time() + 5
        while time.time() < deadline:
            live = C.live_processes([str(root)])
            if C.slug(str(project)) in live.slugs:
                break
            time.sleep(0.02)
        assert C.slug(str(project)) in live.slugs
        run(root, now, yes=True, live=live)
    finally:
        proc.kill()
        proc.wait()
    assert (root / C.slug(str(project)) / "sess" / "scratchpad" / "f.txt").exists()
    assert not (root / "-home-u-old").exists()


def test_session_id_on_a_claude_command_line_marks_its_directory_live(tree):
    root, outside, now = tree
    live = Live(session_ids=frozenset({"s1"}))
    run(root, now, yes=True, live=live)
    assert (root / "-home-u-old" / "s1").exists()


def test_unknown_processes_mean_nothing_is_removed(tree):
    root, outside, now = tree
    assert C.live_processes([str(root)], proc=str(root / "no-proc")) == Live(ok=False)
    lines = run(root, now, yes=True, live=Live(ok=False))
    assert lines == ["nothing to clean"]
    assert (root / "-home-u-old").exists()


def test_file_changing_during_the_sweep_is_kept(tree):
    """Touched between the scan and the delete: the entry holding it stays whole."""
    root, outside, now = tree
    target = root / "-home-u-old" / "tasks" / "b1.output"

    def touch(removal):
        if removal.entry.rel == ("-home-u-old",):
            with open(target, "ab") as f:
                f.write(b"more output\n")

    lines = run(root, now, yes=True, before_remove=touch)
    assert target.read_bytes().endswith(b"more output\n")
    assert (root / "-home-u-old" / "s1" / "scratchpad" / "big.bin").exists()
    assert f"kept {root}/-home-u-old: changed during the sweep" in lines
    assert not (root / "cwd-0a1b").exists()  # the rest of the sweep went on


def test_file_touched_while_the_tree_is_being_removed_survives(tmp_path):
    """The second net: during the removal itself, each entry is checked once more."""
    now = time.time()
    d = tmp_path / "d"
    write(d / "old.txt")
    write(d / "sub" / "new.txt")
    age_tree(d, 5, now)
    os.utime(d / "sub" / "new.txt")  # fresh, after the last whole-tree check
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        freed, kept = C._empty_dir(fd, os.fstat(fd).st_dev, ME, now - 2 * H, 1)
    finally:
        os.close(fd)
    assert kept == 1
    assert not (d / "old.txt").exists()
    assert (d / "sub" / "new.txt").exists()


def test_directory_swapped_for_a_symlink_mid_sweep_is_not_followed(tree):
    root, outside, now = tree
    victim = root / "-home-u-old"

    def swap(removal):
        if removal.entry.rel == ("-home-u-old",):
            victim.rename(root / "moved-away")
            victim.symlink_to(outside)

    lines = run(root, now, yes=True, before_remove=swap)
    assert (outside / "precious.txt").read_bytes() == b"keep me"
    assert victim.is_symlink()
    assert f"kept {victim}: replaced during the sweep" in lines


def test_inner_directory_swapped_for_a_symlink_is_not_followed(tree):
    root, outside, now = tree
    inner = root / "-home-u-old" / "a" / "b"

    def swap(removal):
        if removal.entry.rel == ("-home-u-old",):
            shutil.rmtree(inner)
            inner.symlink_to(outside)
            age(inner, 5, now)
            age(inner.parent, 5, now)  # even made to look old again

    lines = run(root, now, yes=True, before_remove=swap)
    assert lines[0].startswith("freed ") and lines[0].endswith(f": {root}/-home-u-old")  # the removal ran
    assert not os.path.lexists(inner)  # the link went as a link
    assert (outside / "precious.txt").read_bytes() == b"keep me"
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]


def test_symlinked_root_is_refused(tree, tmp_path):
    root, outside, now = tree
    link = tmp_path / "root-link"
    link.symlink_to(root)
    lines = run(link, now, yes=True)
    assert lines[0].startswith(f"skipped {link}: ")
    assert (root / "-home-u-old").exists()


def test_missing_root_is_quiet(tmp_path):
    assert run(tmp_path / "none", time.time(), yes=True) == ["nothing to clean"]


def test_socket_inside_keeps_the_entry(tree):
    import socket

    root, outside, now = tree
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(root / "-home-u-old" / "s1" / "agent.sock"))
        age(root / "-home-u-old" / "s1" / "agent.sock", 5, now)
        age(root / "-home-u-old" / "s1", 5, now)
        run(root, now, yes=True)
    finally:
        s.close()
    assert (root / "-home-u-old" / "s1" / "agent.sock").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_other_users_entries_and_roots_are_left_alone(tree):
    root, outside, now = tree
    os.chown(root / "-home-u-old" / "tasks" / "b1.output", 12345, 12345)
    age(root / "-home-u-old" / "tasks", 5, now)
    os.lchown(root / "cwd-0a1b", 12345, 12345)
    run(root, now, yes=True)
    assert (root / "-home-u-old" / "tasks" / "b1.output").exists()
    assert (root / "cwd-0a1b").exists()
    os.chown(root, 12345, 12345)
    assert run(root, now, yes=True)[0] == f"skipped {root}: owned by uid 12345, not {ME}"


def test_litter_root(tmp_path):
    now = time.time()
    t = tmp_path / "tmp"
    t.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in ("tmp.Ab3dE5fG7h", "fresh-empty", ".X11-unix", f"claude-{ME}", "full", "cwd-here"):
        (t / name).mkdir()
    write(t / "full" / "data.txt")
    write(t / "dead.pid", f"{dead.pid}\n".encode())
    write(t / "alive.pid", f"{os.getpid()}\n".encode())
    write(t / "junk.pid", b"hello\n")
    write(t / "notes.txt")
    write(t / "empty.lock", b"")
    outside_empty = tmp_path / "outside-empty"
    outside_empty.mkdir()
    (t / "link-to-empty").symlink_to(outside_empty)
    for p in t.iterdir():
        if p.name != "fresh-empty":
            age(p, 5, now)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=t / "cwd-here")
    try:
        live = C.live_processes([str(t)])
        dry = C.clean([Root(str(t), LITTER)], now, ME, 2 * H, yes=False, live=live)
        assert sorted(line.split(": ", 1)[1] for line in dry[:-1]) == [
            f"{t}/dead.pid (pid file of dead pid {dead.pid}, untouched 5h)",
            f"{t}/tmp.Ab3dE5fG7h (empty directory, untouched 5h)",
        ]
        C.clean([Root(str(t), LITTER)], now, ME, 2 * H, yes=True, live=live)
    finally:
        proc.kill()
        proc.wait()
    assert sorted(p.name for p in t.iterdir()) == sorted(
        ["fresh-empty", ".X11-unix", f"claude-{ME}", "full", "cwd-here", "alive.pid", "junk.pid",
         "notes.txt", "empty.lock", "link-to-empty"])
    assert outside_empty.is_dir()


def test_litter_dir_filled_during_the_sweep_is_kept(tmp_path):
    now = time.time()
    t = tmp_path / "tmp"
    (t / "e").mkdir(parents=True)
    age(t / "e", 5, now)

    def fill(removal):
        write(t / "e" / "new.txt")
        age(t / "e", 5, now)  # even with its old mtime put back: rmdir refuses a full directory

    lines = C.clean([Root(str(t), LITTER)], now, ME, 2 * H, yes=True, live=NOLIVE, before_remove=fill)
    assert (t / "e" / "new.txt").exists()
    assert lines == [f"kept {t}/e: no longer empty"]


def test_project_patterns(tmp_path):
    now = time.time()
    p = tmp_path / "proj"
    write(p / "src" / "main.c")
    write(p / "build" / "obj" / "main.o")
    write(p / "sub" / "build" / "x.o")
    write(p / "run.log")
    write(p / "fresh.log")
    write(p / ".git" / "run.log")
    write(p / C.PATTERN_FILE, b"build/\n*.log\nsub/build/\n*\n")
    for x in ("src", "build", "sub", "run.log", ".git"):
        age_tree(p / x, 5, now)
    (p / "out.log").symlink_to(tmp_path / "elsewhere.log")
    age(p / "out.log", 5, now)
    write(tmp_path / "elsewhere.log", b"target")

    root, errs = C.read_patterns(str(p), ME)
    assert root.patterns == ("build/", "*.log", "sub/build/")
    assert errs == [f"{p}/.res-clean:4: *: the first name must not be only wildcards"]
    dry = C.clean([root], now, ME, 2 * H, yes=False, live=NOLIVE)
    assert [line.split(": ", 1)[1] for line in dry[:-1]] == [
        f"{p}/build (project pattern 'build/', untouched 5h)",
        f"{p}/out.log (project pattern '*.log', untouched 5h)",
        f"{p}/run.log (project pattern '*.log', untouched 5h)",
        f"{p}/sub/build (project pattern 'sub/build/', untouched 5h)",
    ]
    assert (p / "build" / "obj" / "main.o").exists()

    assert C.clean([root], now, ME, 2 * H, yes=True, auto=True, live=NOLIVE) == ["nothing to clean"]
    assert (p / "build" / "obj" / "main.o").exists()  # the loop's run never touches project patterns

    C.clean([root], now, ME, 2 * H, yes=True, live=NOLIVE)
    assert not (p / "build").exists() and not (p / "run.log").exists() and not (p / "sub" / "build").exists()
    assert (p / "src" / "main.c").exists() and (p / "fresh.log").exists() and (p / ".git" / "run.log").exists()
    assert (tmp_path / "elsewhere.log").read_bytes() == b"target"


def test_pattern_file_that_is_a_symlink_is_ignored(tmp_path):
    p = tmp_path / "proj"
    p.mkdir()
    write(tmp_path / "evil", b"build/\n")
    (p / C.PATTERN_FILE).symlink_to(tmp_path / "evil")
    root, errs = C.read_patterns(str(p), ME)
    assert root is None and len(errs) == 1
    assert C.read_patterns(str(tmp_path / "none"), ME) == (None, [])


def test_default_roots():
    assert C.default_roots(1000) == [Root("/tmp/claude-1000", SCRATCH), Root("/tmp", LITTER), Root("/var/tmp", LITTER)]


def test_scan_is_the_dry_run_of_one_root(tree):
    root, outside, now = tree
    removals, notes = C.scan(str(root), now, ME, scratch_s=2 * H, live=NOLIVE)
    assert notes == []
    assert [r.entry.rel for r in removals] == [("-home-u-old",), ("cwd-0a1b",), ("top-link",)]
    assert removals[0].entry.size >= 200_000 and removals[0].entry.kind == "dir"


def test_the_loop_cleans_at_most_every_clean_every_minutes_and_remembers_across_restarts(tree, tmp_path):
    """daemon.auto_clean: like --yes (stale goes, fresh and symlink targets stay), then not again
    until the interval passed, as recorded in state.db (a new loop on the same state waits too)."""
    from types import SimpleNamespace

    from reconciler.loop.serve import auto_clean
    from reconciler.config.paths import Paths
    from reconciler.recorded.store import Store

    root, outside, now = tree
    paths = Paths(tmp_path / "state")
    paths.ensure()
    policy = SimpleNamespace(clean_every_minutes=10, scratch_hours=2, unit_prefix="res")
    store = Store.open(paths)
    engine = SimpleNamespace(store=store, policy=policy, connected=False, runtime=None)
    try:
        lines = asyncio.run(auto_clean(engine, [Root(str(root), SCRATCH)], now))
        assert sorted(line.split(": ", 1)[1] for line in lines if line.startswith("freed") and ": " in line) == \
            [f"{root}/-home-u-old", f"{root}/cwd-0a1b", f"{root}/top-link"]
        assert (root / "-home-u-new").exists() and outside.exists()
        age_tree(root / "-home-u-new", 5, now)  # stale now, but the interval has not passed
        assert asyncio.run(auto_clean(engine, [Root(str(root), SCRATCH)], now + 599)) is None
        assert (root / "-home-u-new").exists()
    finally:
        store.close()
    with Store.open(paths) as store:  # a restarted loop
        engine = SimpleNamespace(store=store, policy=policy, connected=False, runtime=None)
        assert asyncio.run(auto_clean(engine, [Root(str(root), SCRATCH)], now + 300)) is None
        assert asyncio.run(auto_clean(engine, [Root(str(root), SCRATCH)], now + 600)) is not None
    assert not (root / "-home-u-new").exists()
