#!/bin/bash
# Runs in the guest (tests/guest/guest.py), as root, from the 9p share /mnt/job: installs res from the
# checkout's wheel, runs the README's first command's loop (`res serve`) as the login user `tester` on
# that user's own systemd manager (lingering: started at boot, as at a desktop login), one job through
# it, then pytest as `tester` with the args in pytest-args; what it prints goes to out/.
set -u
job=/mnt/job
out=$job/out
exec > >(tee "$out/inside.txt") 2>&1
uid=1000
as_tester() {
  runuser -u tester -- env HOME=/home/tester USER=tester XDG_RUNTIME_DIR=/run/user/$uid \
    DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE= "$@"
}
echo "guest: kernel $(uname -r); /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup); $(systemctl --version | head -1); $(nproc) cpus; $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
/opt/venv/bin/pip install -q --no-index --no-deps "$job"/res/*.whl || { echo 2 > "$out/pytest.rc"; exit 1; }
for _ in $(seq 1 240); do [ -S /run/user/$uid/bus ] && break; sleep 0.5; done
echo "guest: tester's manager: $(as_tester systemctl --user is-system-running 2>&1)"
echo "guest: delegated to user@$uid.service: $(cat /sys/fs/cgroup/user.slice/user-$uid.slice/user@$uid.service/cgroup.controllers 2>&1)"
cp -r "$job/src" /home/tester/res && chown -R tester: /home/tester/res

# The README's first command, as the user types it once res is installed: the loop on the embedded
# default policy, then one job through it (its exit code is the job's).
as_tester bash -c 'cd ~ && { res serve > ~/serve.log 2>&1 & echo $! > ~/serve.pid; }
  for _ in $(seq 1 300); do [ -S ~/.local/state/res/serve.sock ] && break; sleep 0.2; done
  res run --wait --mem 256M --for 1m -- python3 -c "print(\"hello from a res job\")"; a=$?; echo "guest: res run rc $a"
  res run --wait --mem 256M --for 1m -- sh -c "exit 7"; b=$?; echo "guest: res run rc $b (the job exited 7)"
  echo "$a $b" > /tmp/readme.rc
  res status | head -5
  kill "$(cat ~/serve.pid)"; cat ~/serve.log | tail -5'
cp /tmp/readme.rc "$out/readme.rc"  # (the share is root's: tester cannot write to it)

# Facts of this kernel that res's choices rest on (docs/guest.md), measured on each boot: how long a job
# that outgrows its cap takes to be killed, with MemoryHigh 10 % under MemoryMax and without it.
fill='b = bytearray(300 << 20); print("survived")'
for high in "-p MemoryHigh=57M" ""; do
  t0=$(date +%s.%N)
  as_tester timeout 300 systemd-run --user --wait --quiet --collect -p MemoryMax=64M -p MemorySwapMax=0 $high     /usr/bin/python3 -c "$fill" > /dev/null 2>&1
  rc=$?
  echo "guest: fact: a job allocating 300 MB under MemoryMax=64M ${high:-(no MemoryHigh)}: ended rc $rc after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
done

mapfile -t args < "$job/pytest-args"
cd /home/tester/res
as_tester /opt/venv/bin/python -m pytest -q -p no:cacheprovider "${args[@]}" > "$out/pytest.txt" 2>&1
echo $? > "$out/pytest.rc"
echo "guest: pytest rc $(cat "$out/pytest.rc")"
