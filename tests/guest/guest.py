"""The guest tier (issue 39): res on the desktop most people have, cgroup v2 with systemd as PID 1, in a
real Debian 12 guest booted with QEMU.

    python3 tests/guest/guest.py run [PYTEST ARGS...]     build (or reuse) the image, boot it, run the
                                                          README's first command and pytest inside,
                                                          print what the guest printed; exit code:
                                                          pytest's inside (or 2: the guest failed)
    python3 tests/guest/guest.py crowd [CROWD ARGS...]     the same boot, with bench/crowd.py (default
                                                          --smoke) as the login user instead of pytest;
                                                          exit code: the crowd's
    python3 tests/guest/guest.py image                    only build (or find) the image; print its folder

The image: `mmdebstrap --variant=minbase bookworm` with systemd as init, dbus-user-session, logind,
systemd-oomd and Debian's kernel, a login user `tester` (uid 1000) with lingering (its user manager
starts at boot, as a desktop user's does at login), and a venv (/opt/venv) with res's dependencies
and test dependencies installed from a wheelhouse made on this machine (the guest has no network to
rely on). It is cached under $RES_GUEST_CACHE (default ~/.cache/res-guest) by a key of everything it is
made from (PACKAGES, the wheelhouse's file names, the build's steps and unit), and made again when that
changes (~1 min here). Each boot starts clean (`snapshot=on`).

A boot: QEMU with TCG (this machine's /dev/kvm is not usable by QEMU: its `-cpu host` aborts on an MSR),
2 CPUs, 8 GB, `systemd.unified_cgroup_hierarchy=1`. The checkout (as a wheel of res, and a copy of it
for the tests) reaches the guest over a 9p share (`job`, mounted at /mnt/job), with tests/guest/inside.sh,
which a oneshot unit runs at boot: it installs the wheel into the venv, runs the README's first
command's loop as `tester` (`res serve` on that user's real manager) and then pytest as `tester` with
the user manager's bus, writes pytest's output to the share, and powers the guest off.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("RES_GUEST_CACHE") or Path.home() / ".cache" / "res-guest")
SUITE = "bookworm"
PACKAGES = ("systemd", "systemd-sysv", "dbus", "dbus-user-session", "libpam-systemd", "systemd-oomd",
            "systemd-container", "python3", "python3-venv", "python3-pip", "linux-image-amd64", "procps",
            "util-linux", "iproute2", "kmod", "udev", "ca-certificates")
# The initramfs needs only what finds the root disk (6.5 MB instead of ~40 MB: a faster boot under TCG).
INITRD_MODULES = ("virtio_pci", "virtio_blk", "ext4")
USER, UID = "tester", 1000
IMAGE_GB = 3
# A laptop's memory: with the shipped reserve and headroom (6 + 2 GB) an 8 GB machine gave agents
# nothing until they were scaled down on small machines (docs/guest.md); the README's first command
# here is that check. QEMU allocates the guest's memory as it is touched.
GUEST_MB = 8192
BOOT_TIMEOUT_S = int(os.environ.get("RES_GUEST_TIMEOUT_S", "1500"))


def say(line: str) -> None:
    print(f"guest: {line}", file=sys.stderr, flush=True)


def usable() -> str | None:
    """Why QEMU cannot be used here, or None."""
    for tool in ("qemu-system-x86_64", "mmdebstrap", "mkfs.ext4"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}") and not os.path.exists(f"/sbin/{tool}"):
            return f"{tool} is not installed (apt-get install qemu-system-x86 qemu-utils mmdebstrap e2fsprogs)"
    if os.geteuid() != 0:
        return "building the image needs root (mmdebstrap into a folder, mkfs.ext4 -d)"
    return None


def wheelhouse(dest: Path) -> list[str]:
    """res's dependencies and test dependencies as wheels (not res itself: that is built at each
    boot from the checkout), for this interpreter (bookworm's python3 is 3.11, as is CI's)."""
    dest.mkdir(parents=True, exist_ok=True)
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = project.get("dependencies", []) + project.get("optional-dependencies", {}).get("test", [])
    reqs = dest / "requirements.txt"
    reqs.write_text("\n".join(deps) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(dest), "-r", str(reqs)], check=True)
    return sorted(p.name for p in dest.glob("*.whl"))


def image_key(wheels: list[str]) -> str:
    """Everything the image is made from: the packages, the wheels, the build's own steps and the unit
    it enables (not the rest of this file: a boot's options change no image)."""
    import inspect

    steps = inspect.getsource(build_image) + (HERE / "res-guest.service").read_text()
    text = "\n".join([SUITE, *PACKAGES, *INITRD_MODULES, f"{USER} {UID}", str(IMAGE_GB), *wheels, steps])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_image() -> Path:
    """The image's folder (root.img, vmlinuz, initrd.img), built unless the cache has it."""
    with tempfile.TemporaryDirectory(prefix="res-guest-wh-") as tmp:
        wh = Path(tmp) / "wheels"
        wheels = wheelhouse(wh)
        key = image_key(wheels)
        out = CACHE / key
        if (out / "root.img").is_file() and (out / "vmlinuz").is_file() and (out / "initrd.img").is_file():
            say(f"image {out} (cached)")
            return out
        say(f"building image {out} ({len(wheels)} wheels)")
        t0 = time.monotonic()
        root = Path(tmp) / "root"
        essential = (f'mkdir -p "$1/etc/initramfs-tools/conf.d" && echo MODULES=list > "$1/etc/initramfs-tools/conf.d/res.conf"'
                     f' && printf "%s\\n" {" ".join(INITRD_MODULES)} > "$1/etc/initramfs-tools/modules"')
        customize = [
            f'chroot "$1" useradd -m -u {UID} -s /bin/bash {USER}',
            f'mkdir -p "$1/var/lib/systemd/linger" && touch "$1/var/lib/systemd/linger/{USER}"',
            'echo res-guest > "$1/etc/hostname"',
            'echo "job /mnt/job 9p trans=virtio,version=9p2000.L,msize=262144,nofail 0 0" >> "$1/etc/fstab"',
            'mkdir -p "$1/mnt/job" "$1/opt/wheels"',
            f'cp {wh}/*.whl {wh}/requirements.txt "$1/opt/wheels/"',
            'chroot "$1" python3 -m venv /opt/venv',
            'chroot "$1" /opt/venv/bin/pip install -q --no-index --find-links /opt/wheels -r /opt/wheels/requirements.txt',
            # the unit that runs the job at boot (inside.sh, from the share), and powers off after
            f'cp {HERE}/res-guest.service "$1/etc/systemd/system/"',
            'chroot "$1" systemctl enable res-guest.service',
            'chroot "$1" systemctl mask serial-getty@ttyS0.service getty@tty1.service',
        ]
        cmd = ["mmdebstrap", "--variant=minbase", "--quiet", f"--include={','.join(PACKAGES)}",
               f"--essential-hook={essential}", *[f"--customize-hook={c}" for c in customize], SUITE, str(root)]
        subprocess.run(cmd, check=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=str(CACHE)))
        vmlinuz = sorted(root.glob("boot/vmlinuz-*"))[-1]
        initrd = sorted(root.glob("boot/initrd.img-*"))[-1]
        shutil.copy(vmlinuz, staging / "vmlinuz")
        shutil.copy(initrd, staging / "initrd.img")
        subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(root), str(staging / "root.img"), f"{IMAGE_GB}G"], check=True)
        shutil.rmtree(root, ignore_errors=True)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)  # whole or not at all: a build cut short is never taken for the image
        say(f"image built in {time.monotonic() - t0:.0f} s")
        return out


def crowd_files(dest: Path) -> None:
    """What bench/crowd.py needs and the guest cannot download: the real suites' sdists (their tests)
    and wheels of them and of the test dependencies, for a venv made in the guest (docs/guest.md)."""
    sys.path.insert(0, str(REPO / "bench"))
    from crowdkit.workload import TEST_DEPS, TESTS

    specs = [spec for _, spec, _ in TESTS]
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["download", "--no-deps", "--no-binary", ":all:", "-d", str(dest / "dl"), *specs], check=True)
    subprocess.run(pip + ["wheel", "--wheel-dir", str(dest / "wheels"), *sorted((dest / "dl").iterdir()),
                          *TEST_DEPS], check=True)
    (dest / "want.json").write_text(json.dumps(sorted(set(specs) | set(TEST_DEPS))))
    for path in [dest, *dest.rglob("*")]:  # the login user reads them from the share (pip made them 0600)
        path.chmod(0o755 if path.is_dir() else 0o644)


def share(tests: list[str], crowd_args: list[str] | None = None) -> Path:
    """The job share: a wheel of res from this checkout, a copy of tests/, inside.sh, pytest's args
    (and for `crowd`: the crowd's files and its arguments instead)."""
    d = Path(tempfile.mkdtemp(prefix="res-guest-job-"))
    src = d / "src"  # a copy (the tests read policies/, templates/, README.md); a build writes beside it
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", "__pycache__", "build", "*.egg-info", ".ci-work"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(d / "res"), str(src)],
                   check=True)
    for made in ("build", "res.egg-info"):
        shutil.rmtree(src / made, ignore_errors=True)
    shutil.copy(HERE / "inside.sh", d / "inside.sh")
    (d / "pytest-args").write_text("".join(f"{t}\n" for t in tests))
    if os.environ.get("RES_GUEST_FACTS", "1") != "0":  # the kernel's facts docs/guest.md gives (~2 min)
        (d / "facts").write_text("")
    if crowd_args is not None:
        crowd_files(d / "crowd")
        (d / "crowd-args").write_text("".join(f"{a}\n" for a in crowd_args))
    (d / "out").mkdir()
    os.chmod(d, 0o755)
    return d


def boot(image: Path, job: Path) -> int:
    """Boot the guest on `job`; its console goes to job/out/console.txt. Returns QEMU's exit code."""
    cmd = ["qemu-system-x86_64", "-accel", "tcg,thread=multi", "-smp", "2", "-m", str(GUEST_MB), "-nographic",
           "-no-reboot", "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
           "-append", "console=ttyS0 root=/dev/vda rw systemd.unified_cgroup_hierarchy=1 panic=-1 quiet",
           "-drive", f"file={image / 'root.img'},format=raw,if=virtio,snapshot=on",
           "-virtfs", f"local,path={job},mount_tag=job,security_model=none", "-nic", "none"]
    with open(job / "out" / "console.txt", "wb") as console:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            return p.wait(timeout=BOOT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)  # ours, by its group id
            p.wait()
            say(f"the guest did not power off within {BOOT_TIMEOUT_S} s")
            return 124


def run(tests: list[str], crowd_args: list[str] | None = None) -> int:
    why = usable()
    if why:
        say(f"not run: {why}")
        return 2
    image = build_image()
    job = share(tests or ([] if crowd_args is not None else ["tests/systemd"]), crowd_args)
    t0 = time.monotonic()
    rc = boot(image, job)
    out = job / "out"
    say(f"guest ran {time.monotonic() - t0:.0f} s (qemu rc {rc}); share {job}")
    for name in ("inside.txt", "pytest.txt", "crowd.txt"):
        if (out / name).is_file():
            sys.stdout.write((out / name).read_text(errors="replace"))
    readme = out / "readme.rc"
    if not readme.is_file() or readme.read_text().split() != ["0", "7"]:
        say(f"the README's first command did not run its jobs as it should (res run rc, want 0 then 7: "
            f"{readme.read_text().split() if readme.is_file() else 'none'}); {out / 'inside.txt'}")
        return 1
    for who in ("tester", "stock"):  # `res doctor` on this desktop: clean (inside.sh)
        rc = out / f"doctor-{who}.rc"
        if not rc.is_file() or rc.read_text().strip() != "0":
            say(f"res doctor as {who} was not clean (rc {rc.read_text().strip() if rc.is_file() else 'none'}): "
                f"{out / f'doctor-{who}.txt'}")
            return 1
    status = out / ("crowd.rc" if crowd_args is not None else "pytest.rc")
    if not status.is_file():
        say(f"no pytest result came back; the console: {out / 'console.txt'}")
        sys.stdout.write((out / "console.txt").read_text(errors="replace")[-4000:])
        return 2
    return int(status.read_text().strip() or 2)


def main(argv: list[str]) -> int:
    if argv[:1] == ["image"]:
        why = usable()
        if why:
            say(f"not built: {why}")
            return 2
        print(build_image())
        return 0
    if argv[:1] == ["run"]:
        return run(argv[1:])
    if argv[:1] == ["crowd"]:
        return run([], argv[1:] or ["--smoke"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
