"""`res doctor`: the decision from literal facts, and the parsers of /proc/self/mountinfo and
/proc/mounts (the real command: tests/systemd/test_doctor_real.py)."""
from __future__ import annotations

import re


from reconciler.commands.doctor import Mount, cgroup_dir, fstype_of, v1_hierarchies, v2_mount
from reconciler.core.doctor import Facts, decide

UNIT_DIR = "/home/u/.config/systemd/user"


def healthy(**kw) -> Facts:
    """A cgroup v2 desktop where everything is in place."""
    f = Facts(user="u", manager=None, manager_version="255", cgroup_version=2, memory_mount="/sys/fs/cgroup",
              controllers=frozenset({"memory", "cpu", "io"}),
              controllers_dir="/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service",
              linger=True, oomd_binary="/usr/lib/systemd/systemd-oomd", oomd_running=True, tmp_fstype="tmpfs",
              unit_dir=UNIT_DIR,
              unit_path=("/home/u/.config/systemd/user.control", UNIT_DIR + "/", "/usr/lib/systemd/user"))
    for k, v in kw.items():
        setattr(f, k, v)
    return f


def test_a_healthy_machine_is_all_ok():
    code, lines = decide(healthy())
    assert code == 0
    assert lines == [
        "ok   systemd user manager reachable over D-Bus (systemd 255)",
        "ok   cgroup v2 (unified) at /sys/fs/cgroup",
        "ok   controllers memory, cpu, io delegated to the user manager "
        "(/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service)",
        "ok   lingering enabled for u: jobs survive logout",
        "ok   systemd-oomd running: memory pressure held in the jobs slice ends a job, not your session",
        "ok   /tmp is tmpfs: files there use RAM (res status warns above 25% of it; res clean frees stale scratch)",
        f"ok   unit dir {UNIT_DIR} is in the user manager's search path",
    ]


def test_the_private_manager_and_a_game_reserve_below_the_normal_one_are_named():
    code, lines = decide(healthy(private_manager="systemd --user pid 42"))
    assert code == 0 and lines[0] == ("ok   systemd user manager reachable over D-Bus (systemd 255): the private one res "
                                      "serve started for this state directory (systemd --user pid 42), as none other was "
                                      "reachable")
    code, lines = decide(healthy(manager="no bus", controllers=None, unit_path=None))
    assert code == 1 and lines[0].endswith("; or run res serve, which starts a private one for its state directory "
                                           "(policy private_manager = \"auto\")"), lines[0]
    code, lines = decide(healthy(manager="no bus", private_allowed=False, controllers=None, unit_path=None))
    assert "private one" not in lines[0]
    warn = "policy: game_reserve_gb (4 GB) is below user_reserve_gb (6 GB); game mode keeps 6 GB (raise game_reserve_gb to mean more)"
    code, lines = decide(healthy(policy_warnings=(warn,)))
    assert code == 1 and lines[-1] == ("fix  policy: game_reserve_gb (4 GB) is below user_reserve_gb (6 GB): game mode "
                                       "keeps 6 GB (raise game_reserve_gb to mean more)"), lines[-1]


def test_tmp_not_tmpfs_is_only_information():
    code, lines = decide(healthy(tmp_fstype="ext4"))
    assert code == 0 and "ok   /tmp is ext4, not tmpfs: files there use disk, not RAM" in lines
    code, lines = decide(healthy(tmp_fstype=None))
    assert code == 0 and "ok   /tmp: file system unknown (not in /proc/mounts)" in lines


def test_missing_delegation_on_v2_says_how_to_delegate():
    code, lines = decide(healthy(controllers=frozenset({"memory"})))
    assert code == 1
    (line,) = [x for x in lines if x.startswith("fix")]
    assert line.startswith("fix  controllers cpu, io not delegated to the user manager "
                           "(/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service): ")
    assert "Delegate=cpu cpuset io memory pids" in line and "user@.service.d" in line


def test_lingering_off_is_said_not_a_gap():
    code, lines = decide(healthy(linger=False))
    assert code == 0
    assert ("note lingering off for u (the distribution's default): the loop and its jobs end when you log out and "
            "start again at your next login: to keep them running: loginctl enable-linger u") in lines


def test_oomd_missing_stopped_or_unusable_is_said_not_a_gap():
    code, lines = decide(healthy(oomd_running=False, oomd_binary=None))
    assert code == 0
    assert any(x.startswith("note systemd-oomd not installed: res's pressure ladder and each job's MemoryMax act "
                            "without it") and "sudo apt install systemd-oomd" in x for x in lines), lines
    code, lines = decide(healthy(oomd_running=False))
    assert code == 0 and any(x.startswith("note systemd-oomd installed (/usr/lib/systemd/systemd-oomd) but not running: ")
                             and x.endswith("sudo systemctl enable --now systemd-oomd") for x in lines), lines
    code, lines = decide(healthy(oomd_running=False, cgroup_version=1, memory_mount="/sys/fs/cgroup/memory"))
    assert code == 0 and any(x.startswith("note systemd-oomd cannot run without cgroup v2")
                             and "unified_cgroup_hierarchy=1" in x for x in lines), lines


def test_a_stock_debian_12_is_clean():
    """What the guest tier saw on a default Debian 12 (docs/guest.md): systemd delegates `cpu memory pids`
    (no io), lingering off, no systemd-oomd. res works there: notes, exit 0."""
    code, lines = decide(healthy(controllers=frozenset({"memory", "cpu"}), linger=False, oomd_binary=None,
                                 oomd_running=False, tmp_fstype="ext4"))
    assert code == 0 and not [x for x in lines if x.startswith("fix")], lines
    assert lines[2] == ("note controllers memory, cpu delegated to the user manager "
                        "(/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service); io not (systemd's default): the "
                        "agents slice's IOWeight does nothing, agents' disk I/O competes evenly with yours: to weigh it: "
                        "sudo mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu cpuset io "
                        "memory pids\\n' | sudo tee /etc/systemd/system/user@.service.d/delegate.conf && sudo systemctl "
                        "daemon-reload, then log out and in again"), lines[2]


def test_v1_hybrid_machine_like_ci():
    """This CI machine: cgroup v1 for memory, cgroup2 beside it, a private manager owning the root."""
    code, lines = decide(healthy(cgroup_version=1, cgroup_hybrid=True, memory_mount="/sys/fs/cgroup/memory",
                                 controllers_dir="/ in the v1 hierarchies", oomd_binary=None, oomd_running=False,
                                 linger=False, tmp_fstype="ext4"))
    assert code == 0
    assert lines[1] == "ok   cgroup v1 (hybrid): memory hierarchy at /sys/fs/cgroup/memory"
    assert lines[2] == "ok   controllers memory, cpu, io delegated to the user manager (/ in the v1 hierarchies)"
    lines = decide(healthy(cgroup_version=1, controllers=frozenset(), controllers_dir="/user.slice/x"))[1]
    assert lines[2].startswith("fix  controllers memory, cpu, io not delegated to the user manager (/user.slice/x): "
                               "boot with systemd.unified_cgroup_hierarchy=1")


def test_no_memory_controller_at_all():
    code, lines = decide(healthy(cgroup_version=None, memory_mount="", controllers=None, oomd_running=False))
    assert code == 1
    assert lines[1].startswith("fix  no cgroup hierarchy with the memory controller: boot with systemd.unified")


def test_unreachable_manager_still_gives_a_line_per_check():
    f = healthy(manager="unix:path=/run/user/1000/bus: [Errno 2] No such file or directory", manager_version="",
                controllers=None, unit_path=None)
    code, lines = decide(f)
    assert code == 1 and len(lines) == 7
    assert lines[0].startswith("fix  systemd user manager unreachable (unix:path=/run/user/1000/bus: [Errno 2] "
                               "No such file or directory): log in through a systemd session")
    assert lines[2] == ("fix  controllers delegated to the user manager not known: "
                        "fix the user manager first, then run res doctor again")
    assert lines[6] == (f"fix  unit dir {UNIT_DIR} in the user manager's search path not known: "
                        "fix the user manager first, then run res doctor again")


def test_unit_dir_outside_the_search_path():
    code, lines = decide(healthy(unit_dir="/elsewhere/systemd/user"))
    assert code == 1
    assert lines[6] == ("fix  unit dir /elsewhere/systemd/user is not in the user manager's search path: "
                        "run res with the XDG_CONFIG_HOME the manager has (systemctl --user show-environment)")


def test_every_line_is_ok_or_fix_and_one_line():
    f = healthy(manager="x\ny", linger=False, oomd_running=False)
    lines = decide(f)[1]
    assert len(lines) == 7 and lines[0].startswith("fix  systemd user manager unreachable (x y): ")
    for line in lines:
        assert re.match(r"^(ok   |fix  |note )\S", line) and "\n" not in line, line


HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
UNIFIED = "29 23 0:26 /user.slice /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_cgroup_mounts_from_mountinfo():
    v1 = v1_hierarchies(HYBRID)
    assert v1["memory"][:2] == ("/sys/fs/cgroup/memory", "/")
    assert v1["blkio"][:2] == ("/sys/fs/cgroup/blkio", "/") and v1["cpu"].path == "/sys/fs/cgroup/cpu"
    assert v2_mount(HYBRID)[:2] == ("/sys/fs/cgroup/unified", "/")
    assert v1_hierarchies(UNIFIED) == {}
    assert v2_mount(UNIFIED)[:2] == ("/sys/fs/cgroup", "/user.slice")


def test_cgroup_dir_of_the_manager():
    m = Mount("/sys/fs/cgroup", "/", "cgroup2", ())
    assert cgroup_dir(m, "/user.slice/user-1000.slice/user@1000.service") == \
        "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service"
    assert cgroup_dir(m, "") == "/sys/fs/cgroup"  # a private manager owning the root
    assert cgroup_dir(Mount("/sys/fs/cgroup", "/user.slice", "cgroup2", ()), "/user.slice/u.service") == "/sys/fs/cgroup/u.service"


def test_fstype_of_tmp():
    mounts = "/dev/vda / ext4 rw 0 0\nproc /proc proc rw 0 0\n"
    assert fstype_of("/tmp", mounts) == "ext4"
    assert fstype_of("/tmp", mounts + "tmpfs /tmp tmpfs rw,nosuid 0 0\n") == "tmpfs"
    assert fstype_of("/tmp", mounts + "tmpfs /tmpx tmpfs rw 0 0\n") == "ext4"
    assert fstype_of("/tmp", mounts + "tmpfs /tmp tmpfs rw 0 0\n/dev/sdb /tmp xfs rw 0 0\n") == "xfs"
    assert fstype_of("/tmp", "") is None




def test_which_agent_clis_are_gated():
    code, lines = decide(healthy(gates=(("claude", True, "/home/u/.claude/settings.json"),
                                        ("codex", False, "/home/u/.codex/hooks.json"),
                                        ("gemini", None, "/home/u/.gemini/settings.json"))))
    assert code == 0  # a CLI without the gate is worth knowing, not a gap in what res needs
    assert lines[-3:] == [
        "ok   claude: gated (res hook in /home/u/.claude/settings.json)",
        "note codex is on this machine and not gated: its heavy commands run without asking res: "
        "res hook install --agent codex (writes /home/u/.codex/hooks.json)",
        "note gemini: whether it is gated is not known: /home/u/.gemini/settings.json cannot be read",
    ]


def test_a_gate_that_cannot_load_its_code_is_a_gap_to_fix():
    """An install that lacks one of the gate's modules answers every hook with no opinion (it never
    gets in an agent's way): doctor says so and exits 1 (stop 47's regular installs lacked core/clis/)."""
    code, lines = decide(healthy(gate_broken="ModuleNotFoundError: No module named 'reconciler.core.clis'"))
    assert code == 1
    assert any(ln.startswith("fix  res hook cannot load its own code (ModuleNotFoundError: No module named "
                             "'reconciler.core.clis'): every agent's heavy commands run as if res were not there")
               for ln in lines), lines
    assert decide(healthy())[0] == 0
