"""Pure tier: the user's side of a plan, with literals: game mode on the agents slice, sessions kept
in their slice, the status warnings, and the small parsers they rest on."""
from dataclasses import replace

from reconciler.config.paths import Paths
from reconciler.observed import cgroup
from reconciler.core.game import game_actions as decide_game, slice_target
from reconciler.core.models import Desired, Game, JobObs, JobRecord, Phase, Request, SessionObs, SliceObs, World
from reconciler.observed.machine import stray_units, tmp_tmpfs_used_gb
from reconciler.core.plan import plan as decide
from reconciler.observed.procs import Proc, descendants, parse_stat
from reconciler.render.lines import agents_memory_line, plan_line, status_warnings
from reconciler.core.sessions import scope_name, session_actions as decide_sessions, shell_init_line
from reconciler.core.quantities import GIB, UTC
from reconciler.render.reasons import action_reason, explain
from reconciler.render.unitfiles import slice_units
from ruleset import policy


def _explained(actions):
    for a in actions:
        a.reason = action_reason(a, UTC)
    return actions


def game_actions(*args):
    return _explained(decide_game(*args))


def session_actions(*args):
    return _explained(decide_sessions(*args))


def plan(*args, **kw):
    return explain(decide(*args, **kw), UTC)

NOW = 1_780_000_000.0
LOADED = policy(user_reserve_gb=6, user_reserve_cpus=0, game_reserve_gb=12, game_reserve_cpus=0,
                small_headroom_gb=2, session_mem_gb=6, agents_slice="agents.slice", adopt_sessions=True,
                jobs_slice="agents-jobs.slice", unit_prefix="res", max_concurrent_sessions=3,
                max_starts_per_tick=4, max_cost_usd=0, max_duration=0, max_iterations=0,
                daily_cost_usd=0)
POLICY = LOADED.rules()  # what the core's functions take; the shell's (slice_units) take LOADED
NORMAL = {"CPUWeight": 20, "IOWeight": 20, "MemoryHigh": 26 * GIB}
GAME = {"CPUWeight": 5, "IOWeight": 5, "MemoryHigh": 20 * GIB}


def world(**kw) -> World:
    return World(mem_total_gb=32.0, mem_available_gb=28.0, nproc=8, **kw)


def agents(cpu=20, io=20, high=26 * GIB, used=3.0, cache=1.0) -> SliceObs:
    return SliceObs(name="agents.slice", cpu_weight=cpu, io_weight=io, memory_high=high, mem_used_gb=used, mem_file_gb=cache)


# ---------------------------------------------------------------- game mode on the slice


def test_game_on_sets_the_slice_and_says_what_changes():
    acts = game_actions(Desired(game=Game(on=True, until=NOW + 3600)), world(agents_slice=agents()), NOW, POLICY)
    assert [(a.kind, a.id, a.props) for a in acts] == [("set", "agents.slice", GAME)]
    assert acts[0].detail == {"code": "game_slice", "game": "on", "until": NOW + 3600,
                              "changes": {"MemoryHigh": [26 * GIB, 20 * GIB], "CPUWeight": [20, 5], "IOWeight": [20, 5]}}


def test_game_off_restores_and_a_matching_slice_is_left_alone():
    w = world(agents_slice=agents(cpu=5, io=5, high=20 * GIB))
    acts = game_actions(Desired(game=Game()), w, NOW, POLICY)
    assert [(a.kind, a.props) for a in acts] == [("set", NORMAL)]
    assert (acts[0].detail["game"], acts[0].detail["until"]) == ("off", None)
    assert game_actions(Desired(game=Game()), world(agents_slice=agents()), NOW, POLICY) == []


def test_expired_game_is_cleared_in_the_file_and_the_slice_restored():
    until = NOW - 5
    acts = game_actions(Desired(game=Game(on=True, until=until)), world(agents_slice=agents(cpu=5, io=5, high=20 * GIB)), NOW, POLICY)
    assert [(a.kind, a.id) for a in acts] == [("end_game", "game.toml"), ("set", "agents.slice")]
    assert acts[0].at == until  # the writer clears it only if the file still says this `until`
    assert acts[1].props == NORMAL


def test_a_broken_game_file_is_never_rewritten_and_an_unobserved_slice_is_never_set():
    d = Desired(game=Game(on=True, until=NOW - 5), game_ok=False)
    assert [a.kind for a in game_actions(d, world(agents_slice=agents(cpu=5, io=5, high=20 * GIB)), NOW, POLICY)] == ["set"]
    assert game_actions(Desired(game=Game(on=True, until=NOW + 60)), world(), NOW, POLICY) == []


def test_unset_values_read_as_systemd_reports_them():
    unset = (1 << 64) - 1
    acts = game_actions(Desired(), world(agents_slice=agents(cpu=unset, io=None, high=unset)), NOW, POLICY)
    assert acts[0].detail["changes"] == {"MemoryHigh": [unset, 26 * GIB], "CPUWeight": [unset, 20], "IOWeight": [None, 20]}


def test_memory_high_is_rounded_up_to_256_mib_so_growing_use_is_not_reset_every_pass():
    on = Game(on=True, until=NOW + 60)
    a = slice_target(POLICY, on, NOW, 32.0, 20.01)["MemoryHigh"]
    b = slice_target(POLICY, on, NOW, 32.0, 20.2)["MemoryHigh"]
    assert a == b == 20 * GIB + 256 * 1024 * 1024
    assert a >= 20.2 * GIB  # never below what agents use


def test_plan_carries_the_user_side_next_to_the_jobs():
    w = world(agents_slice=agents(), sessions=[SessionObs(pid=41, in_slice=False, unit="init.scope", children=[42, 43])])
    p = plan(Desired(game=Game(on=True, until=NOW + 60)), {}, w, NOW, POLICY)
    assert [(a.kind, a.id) for a in p.actions] == [("set", "agents.slice"), ("adopt", "res-claude-41.scope")]
    assert p.actions[1].detail == {"code": "outside_slice", "pid": 41, "children": 2, "slice": "agents.slice"}
    assert plan_line(p.actions[1]) == f"  ~ adopt    res-claude-41.scope              {p.actions[1].reason}"


# ---------------------------------------------------------------- sessions


def test_a_session_outside_is_adopted_with_its_children_and_the_session_memory_limit():
    (a,) = session_actions(world(sessions=[SessionObs(pid=7, in_slice=False, unit="vte-spawn-1.scope", children=[8])]), POLICY)
    assert (a.kind, a.id, a.pids, a.props) == ("adopt", "res-claude-7.scope", [7, 8], {"MemoryHigh": 6 * GIB})
    assert a.detail == {"code": "outside_slice", "pid": 7, "children": 1, "slice": "agents.slice"}
    off = replace(POLICY, adopt_sessions=False)
    assert session_actions(world(sessions=[SessionObs(pid=7, in_slice=False)]), off) == []
    sized = SessionObs(pid=8, in_slice=True, scope="run-u3.scope", scope_memory_high=None)
    assert [a.kind for a in session_actions(world(sessions=[sized]), off)] == ["set"]  # sizing is not moving


def test_sessions_in_a_service_or_a_container_are_never_moved():
    from reconciler.core.sessions import movable_from

    assert [movable_from(u) for u in ("vte-spawn-1.scope", "session-2.scope", "init.scope", "run-u4.scope")] == [True] * 4
    assert [movable_from(u) for u in ("bot.service", "libpod-abc.scope", "docker-1.scope", "")] == [False] * 4
    s = SessionObs(pid=7, in_slice=False, unit="bot.service", movable=False)
    assert session_actions(world(sessions=[s]), POLICY) == []


def test_a_scope_with_another_memory_high_is_set():
    s = SessionObs(pid=7, in_slice=True, scope="run-u9.scope", scope_memory_high=(1 << 64) - 1)
    acts = session_actions(world(sessions=[s]), POLICY)
    assert [(a.kind, a.id, a.pids, a.props) for a in acts] == [("set", "run-u9.scope", [], {"MemoryHigh": 6 * GIB})]
    assert acts[0].detail == {"code": "session_memory", "was": (1 << 64) - 1, "to_gb": 6}


def test_sessions_in_place_in_a_job_or_with_limits_off_are_left_alone():
    fine = SessionObs(pid=7, in_slice=True, scope="res-claude-7.scope", scope_memory_high=6 * GIB)
    in_job = SessionObs(pid=8, in_slice=True, scope=None)
    assert session_actions(world(sessions=[fine, in_job]), POLICY) == []
    off = replace(POLICY, session_mem_gb=0)
    odd = SessionObs(pid=7, in_slice=True, scope="res-claude-7.scope", scope_memory_high=2 * GIB)
    assert session_actions(world(sessions=[odd]), off) == []
    (a,) = session_actions(world(sessions=[SessionObs(pid=9, in_slice=False)]), off)
    assert a.props == {} and a.detail == {"code": "outside_slice", "pid": 9, "children": 0, "slice": "agents.slice"}
    assert session_actions(world(sessions=None), POLICY) == []  # not observed: nothing


def test_scope_name_and_shell_init_line():
    assert scope_name("res", 1234) == "res-claude-1234.scope"
    assert shell_init_line(POLICY, "/usr/bin/systemd-run") == (
        "alias claude='/usr/bin/systemd-run --user --scope --quiet --collect --slice=agents.slice "
        "-p MemoryHigh=6442450944 claude'")
    odd = replace(POLICY, session_mem_gb=0)
    assert shell_init_line(odd, "/opt/my tools/systemd-run") == (
        "alias claude=''\"'\"'/opt/my tools/systemd-run'\"'\"' --user --scope --quiet --collect --slice=agents.slice claude'")


# ---------------------------------------------------------------- status


def rec(n: int, mem: float, title="make e2e") -> JobRecord:
    return JobRecord(request=Request(id=f"r-{n}", title=title, mem_gb=mem, est_s=600, created=NOW, cmd=["x"]),
                     phase=Phase.running, started=NOW - 60)


def test_agents_memory_line_takes_jobs_out_and_names_the_cache():
    w = world(agents_slice=agents(used=9.0, cache=1.5), jobs={"r-1": JobObs(state="active", mem_used_gb=6.0)})
    assert agents_memory_line(w) == "agents slice uses 9.0 GB: jobs 6.0 GB, unreserved 3.0 GB (of which 1.5 GB reclaimable cache)"
    assert agents_memory_line(world()) is None


def test_status_warnings_each_with_its_threshold():
    w = world(jobs={"r-1": JobObs(state="active", mem_used_gb=8.6, pressure_avg60=25.0),  # throttled
                    "r-2": JobObs(state="active", mem_used_gb=8.4, pressure_avg60=80.0),  # 0.84 of its mem
                    "r-3": JobObs(state="active", mem_used_gb=9.9, pressure_avg60=19.9)},  # low pressure
              tmp_tmpfs_used_gb=8.5, sessions=[SessionObs(pid=5, in_slice=False), SessionObs(pid=6, in_slice=True),
                                               SessionObs(pid=4, in_slice=False, unit="bot.service", movable=False)],
              stray_services=["run-u12.service", "run-u13.service"], stray_from={"run-u12.service": "r-2"},
              stray_mem_gb={"run-u12.service": 1.5})
    assert status_warnings(w, [rec(1, 10), rec(2, 10), rec(3, 10)], POLICY) == [
        'r-1 "make e2e" is throttled at its own limit (8.6 GB of 10.0 GB, memory pressure 25%); it would run faster with more --mem',
        "/tmp is a tmpfs holding 8.5 GB (27% of RAM); see res clean",
        "claude pid 4 runs in bot.service, outside agents.slice (left there: res moves sessions out of scopes only)",
        "1 claude session outside agents.slice (pid 5); res adopt moves them",
        "transient services outside the agents slices, outside every budget: run-u12.service (from r-2, 1.5 GB), "
        "run-u13.service (agents: use res run; res stops none of them: docs/escaping.md)",
    ]
    assert status_warnings(world(tmp_tmpfs_used_gb=8.0), [], POLICY) == []  # exactly 25 %: fine


# ---------------------------------------------------------------- parsers


def test_parse_stat_with_a_hostile_name():
    assert parse_stat("123 (a) b (c)) S 77 123 123 0 -1") == ("a) b (c)", 77, "S")


def test_a_claude_inside_a_session_is_part_of_it_not_a_session():
    from reconciler.observed.procs import inside_session

    procs = {p.pid: p for p in [Proc(1, 0, "init", 0), Proc(10, 1, "claude", 0), Proc(11, 10, "bash", 0),
                                Proc(12, 11, "claude", 0), Proc(20, 1, "bash", 0), Proc(21, 20, "claude", 0)]}
    assert [inside_session(procs, pid) for pid in (10, 12, 21)] == [False, True, False]
    assert not inside_session(procs, 99)


def test_unit_of_a_cgroup():
    from reconciler.observed.machine import unit_of_cgroup

    mgr = "/user.slice/user-1000.slice/user@1000.service"
    assert unit_of_cgroup(mgr + "/app.slice/app-gnome-term.slice/vte-spawn-1.scope", mgr) == "vte-spawn-1.scope"
    assert unit_of_cgroup(mgr + "/app.slice/bot.service/sub", mgr) == "bot.service"
    assert unit_of_cgroup("/user.slice/user-1000.slice/session-2.scope", mgr) == "session-2.scope"
    assert unit_of_cgroup("/init.scope", "/") == "init.scope"
    assert unit_of_cgroup("/", "/") == ""


def test_reclaimable_cache_leaves_shared_memory_out():
    assert cgroup.reclaimable_cache("cache 9\ntotal_cache 5000\ntotal_shmem 1200\n", 1) == 3800
    assert cgroup.reclaimable_cache("anon 1\nfile 4096\nshmem 4096\n", 2) == 0
    assert cgroup.reclaimable_cache("file 100\n", 2) == 100
    assert cgroup.reclaimable_cache("", 2) is None


def test_descendants_parents_first():
    procs = {p.pid: p for p in [Proc(1, 0, "init", 0), Proc(10, 1, "claude", 0), Proc(11, 10, "sh", 0),
                                Proc(12, 11, "make", 0), Proc(13, 10, "git", 0), Proc(20, 1, "other", 0)]}
    assert descendants(procs, 10) == [11, 13, 12]
    assert descendants(procs, 12) == []


def test_process_cgroup_prefers_the_systemd_hierarchy():
    v1 = "9:name=systemd:/agents.slice/res-claude-7.scope\n4:memory:/agents.slice\n0::/other"
    assert cgroup.process_unit_cgroup(v1) == "/agents.slice/res-claude-7.scope"
    assert cgroup.process_unit_cgroup("0::/user.slice/x.scope\n") == "/user.slice/x.scope"
    assert cgroup.process_unit_cgroup("") is None
    assert cgroup.slice_cgroup("/user.slice/user-1000.slice/user@1000.service", "agents-jobs.slice") == \
        "/user.slice/user-1000.slice/user@1000.service/agents.slice/agents-jobs.slice"


def test_pressure_some_avg60():
    text = "some avg10=1.00 avg60=21.50 avg300=3.00 total=123\nfull avg10=0.00 avg60=9.00 avg300=0.00 total=1\n"
    assert cgroup.parse_pressure_some_avg60(text) == 21.5
    assert cgroup.parse_pressure_some_avg60("") is None
    assert cgroup.parse_pressure_some_avg60("some avg60=x") is None


def test_tmp_only_counts_when_it_is_a_tmpfs():
    assert tmp_tmpfs_used_gb("/dev/sda1 / ext4 rw 0 0\n/dev/sda2 /tmp ext4 rw 0 0\n") is None
    assert tmp_tmpfs_used_gb("/dev/sda1 / ext4 rw 0 0\n") is None
    got = tmp_tmpfs_used_gb("tmpfs /tmp tmpfs rw 0 0\n")  # statvfs of the real /tmp, whatever it is
    assert got is not None and got >= 0


def test_a_stray_service_says_the_job_its_systemd_run_marked(tmp_path):
    from reconciler.observed.machine import stray_units

    (tmp_path / "run-u1.service").write_text('[Service]\nEnvironment="RES_ESCAPED_FROM=r-12"\nExecStart=/bin/sleep 1\n')
    (tmp_path / "run-u2.service").write_text("[Service]\nExecStart=/bin/sleep 1\n")
    (tmp_path / "run-u3.service").write_text('[Service]\nEnvironment=RES_ESCAPED_FROM=r-x\nExecStart=/bin/true\n')
    assert stray_units(str(tmp_path), ("agents.slice",)) == [("run-u1.service", "app.slice", "r-12"),
                                                            ("run-u2.service", "app.slice", None),
                                                            ("run-u3.service", "app.slice", None)]


def test_stray_services_from_transient_unit_files(tmp_path):
    files = {"run-u1.service": "[Service]\nExecStart=x\n",  # default slice: app.slice, not a desktop launcher
             "run-u2.service": "[Service]\nSlice=agents.slice\n", "res-r-1.service": "[Service]\nSlice=agents-jobs.slice\n",
             "app-firefox-3.service": "[Service]\n", "x.service": "[Service]\nSlice=session.slice\n",
             "run-u3.scope": "[Scope]\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert stray_units(str(tmp_path), ("agents.slice", "agents-jobs.slice")) == [("run-u1.service", "app.slice", None)]
    assert stray_units(str(tmp_path / "missing"), ()) == []


def test_another_res_jobs_and_loops_are_not_strays_but_a_marked_escape_is(tmp_path):
    """A second res on the same manager (another state directory: a test run beside the user's own)
    runs its jobs and its loop in slices of its own: its to budget, not escapes from this one; an
    escape that also carries such a variable is still one (hand-built files, in the quoting systemd
    writes an Environment= of several assignments with)."""
    from reconciler.observed.machine import stray_units

    files = {"res2-r-1.service": '[Service]\nSlice=other-jobs.slice\nEnvironment="PATH=/usr/bin" "RES_EXIT_RECORD=/s/exit/r-1"\nExecStart=x\n',
             "res2-serve-ab.service": '[Service]\nEnvironment="RES_STATE_DIR=/s" "PATH=/usr/bin"\nExecStart=x\n',
             "run-u4.service": '[Service]\nEnvironment="RES_ESCAPED_FROM=r-3" "RES_STATE_DIR=/s"\nExecStart=x\n',
             "run-u5.service": '[Service]\nEnvironment="MY_RES_STATE_DIR=/s"\nExecStart=x\n'}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert stray_units(str(tmp_path), ("agents.slice", "agents-jobs.slice")) == [("run-u4.service", "app.slice", "r-3"),
                                                                                ("run-u5.service", "app.slice", None)]


def test_the_loop_the_first_call_started_is_not_a_stray(tmp_path):
    """Found in a trial: `res status` warned about res's own loop (started by the first call as a
    transient service in app.slice) as an agent's stray service."""
    from reconciler.config.paths import loop_unit_stem
    from reconciler.loop.start import unit_name

    loop = unit_name(Paths(tmp_path / "state"), "res")
    assert loop.startswith(loop_unit_stem("res") + "-")
    (tmp_path / loop).write_text("[Service]\nExecStart=python3 -m reconciler.cli serve\n")
    (tmp_path / "run-u1.service").write_text("[Service]\nExecStart=x\n")
    ours = ("agents.slice", "agents-jobs.slice")
    names = lambda *prefix: [name for name, _, _ in stray_units(str(tmp_path), ours, *prefix)]  # noqa: E731
    assert names(loop_unit_stem("res")) == ["run-u1.service"]
    assert names() == sorted([loop, "run-u1.service"])  # without it, as before


def test_slice_unit_files_carry_the_normal_share_and_oomd_only_where_present():
    texts = slice_units(LOADED, 32.0, oomd=True)
    assert set(texts) == {"agents.slice", "agents-jobs.slice"}
    assert "CPUWeight=20\nIOWeight=20\nMemoryHigh=27917287424\n" in texts["agents.slice"]
    assert "ManagedOOMMemoryPressure=kill" in texts["agents-jobs.slice"]
    assert "ManagedOOMMemoryPressure" not in slice_units(LOADED, 32.0, oomd=False)["agents-jobs.slice"]


def test_slice_values_line():
    from reconciler.render.game import slice_values

    assert slice_values({"MemoryHigh": 18 * GIB, "CPUWeight": 5, "IOWeight": None}) == \
        "MemoryHigh 18.0 GB, CPUWeight 5, IOWeight default"
    assert slice_values({"MemoryHigh": (1 << 64) - 1}) == "MemoryHigh max, CPUWeight default, IOWeight default"


def test_a_transient_file_still_being_written_is_not_judged(tmp_path):
    (tmp_path / "res-r-1.service").write_text("# transient\n[Unit]\nDescription=res r-1: make\n")  # no Slice= yet
    (tmp_path / "run-u7.service").write_text("[Unit]\n[Service]\nExecStart=\nExecStart=/bin/x\n")
    assert [n for n, _, _ in stray_units(str(tmp_path), ("agents.slice", "agents-jobs.slice"))] == ["run-u7.service"]


def test_an_agent_cli_is_known_by_its_name_or_its_scripts():
    from reconciler.core.agents import agent_name

    assert agent_name("claude", ["claude", "-p", "x"]) == "claude"
    assert agent_name("codex", ["/usr/local/bin/codex", "exec"]) == "codex"
    # an npm-installed CLI under node: `#!/usr/bin/env node` makes the process node, argv[1] the script
    assert agent_name("node", ["node", "/usr/lib/node_modules/@google/gemini-cli/dist/gemini.js"]) == "gemini"
    assert agent_name("node", ["node", "--no-warnings", "/home/u/.npm/bin/gemini"]) == "gemini"
    assert agent_name("python3", ["python3", "/home/u/.local/bin/aider", "--model", "x"]) == "aider"
    assert agent_name("python3.12", ["python3.12", "-m", "pytest"]) is None
    assert agent_name("node", ["node", "server.js"]) is None
    assert agent_name("bash", ["bash", "-c", "claude"]) is None


def test_a_session_res_keeps_is_a_claude_by_its_name_or_its_argv0():
    """core.agents.is_session: the sessions res adopts (by the process name alone: the loop's look, the
    world's sessions) and those whose scratch `res clean` keeps (also by argv[0])."""
    from reconciler.core.agents import is_session

    assert is_session("claude") and is_session("claude", ["claude", "-p", "x"])
    assert is_session("node", ["/usr/local/bin/claude", "--resume", "s"])  # argv[0] names it
    assert not is_session("node", ["node", "/usr/lib/node_modules/claude.js"])  # as res clean always had it
    assert not is_session("codex") and not is_session("bash", ["bash", "-c", "claude"]) and not is_session("node")


def test_res_init_says_what_it_lays_down():
    from reconciler.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    text = sub.choices["init"].description or sub._choices_actions[[c.dest for c in sub._choices_actions].index("init")].help
    assert "queue.toml" in text and "policy" not in text, text


def test_a_command_line_parses_the_same_with_only_its_own_subcommand_built():
    """`res` builds only the parser of the subcommand it was given (cli.build_parser(only)): what it
    parses must be exactly what the whole tree parses, and its usage errors the same lines."""
    from reconciler.cli import _NAMES, build_parser
    import pytest

    from reconciler.commands.base import Fail

    lines = [
        ["run", "--mem", "10G", "--for", "40m", "--queue", "--lock", "e2e", "--by", "me", "--", "make", "e2e"],
        ["run", "--mem=512M", "--cpus", "2", "--for", "1h", "--wait", "--tail", "5", "--on", "cluster", "--", "true"],
        ["note", "--mem", "2G", "--for", "30m", "--owner", "4242", "editing"],
        ["status", "r-3", "--json"], ["status", "--all"], ["wait", "r-1", "--timeout", "5m"],
        ["release", "r-2", "--stop"], ["reconcile", "--dry-run", "--json"], ["serve", "--standby"],
        ["game", "on", "--for", "2h"], ["hist", "--changes"], ["clean", "--yes"], ["service", "install"],
        ["adopt"], ["shell-init"], ["doctor"], ["agent-rules"], ["init", "--force"], ["observe", "--json"],
        ["hook", "--print-config"], ["top"],
        ["web", "--open"],
    ]
    assert {line[0] for line in lines} == _NAMES  # every subcommand tried
    for line in lines:
        assert vars(build_parser(line[0]).parse_args(line)) == vars(build_parser().parse_args(line)), line
    for bad in (["run", "--mem", "1G"], ["wait"], ["game", "sideways"], ["run", "--mem", "lots", "--for", "1m"]):
        said = []
        for parser in (build_parser(bad[0]), build_parser()):
            with pytest.raises(Fail) as e:
                parser.parse_args(bad)
            said.append((e.value.line, e.value.code))
        assert said[0] == said[1] and said[0][1] == 2, said


def test_explain_reuses_a_reason_only_for_the_same_kind_detail_and_zone():
    from reconciler.core.models import Action, Plan
    from reconciler.render.reasons import explained, queued_line

    def waiting(pos: int, kind: str = "wait") -> Action:
        return Action(kind, f"r-{pos}", detail={"code": "queued", "position": pos, "est_start": None,
                                                "waits_for": "queue_head", "head": "r-1"})

    last = explained(explain(Plan(actions=[waiting(2), waiting(3), waiting(4)]), UTC), UTC)
    last["by_id"]["r-2"] = ("wait", last["by_id"]["r-2"][1], "REUSED")  # marks what is taken over
    last["by_id"]["r-4"] = ("wait", last["by_id"]["r-4"][1], "REUSED")
    p = Plan(actions=[waiting(2), waiting(3, "enqueue"), Action("wait", "r-4", detail={
        "code": "queued", "position": 3, "est_start": None, "waits_for": "queue_head", "head": "r-1"})])
    explain(p, UTC, last)
    assert p.actions[0].reason == "REUSED"  # same kind, same detail
    assert p.actions[1].reason == queued_line(p.actions[1].detail, UTC)  # another kind: made again
    assert p.actions[2].reason == queued_line(p.actions[2].detail, UTC)  # its detail changed: made again
    other_zone = Plan(actions=[waiting(2)])
    explain(other_zone, lambda ts: 3600, last)
    assert other_zone.actions[0].reason != "REUSED"  # another zone: made again
