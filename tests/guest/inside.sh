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

if [ -f "$job/facts" ]; then
# Facts of this kernel that res's choices rest on (docs/guest.md), measured on each boot: how long a job
# that outgrows its cap takes to be killed, with MemoryHigh 10 % under MemoryMax (rc 124: still throttled
# after 30 s) and without it.
fill='b = bytearray(300 << 20); print("survived")'
n=0
for high in "-p MemoryHigh=57M" ""; do
  n=$((n + 1))
  t0=$(date +%s.%N)
  as_tester timeout 30 systemd-run --user --wait --quiet --collect --unit="fact-high-$n" -p MemoryMax=64M \
    -p MemorySwapMax=0 $high /usr/bin/python3 -c "$fill" > /dev/null 2>&1
  rc=$?
  as_tester systemctl --user stop "fact-high-$n" 2>/dev/null  # (timeout ended systemd-run, not the unit)
  echo "guest: fact: a job allocating 300 MB under MemoryMax=64M ${high:-(no MemoryHigh)}: ended rc $rc after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
done

fi

# `res doctor` as tester (lingering on, systemd-oomd running: this image), then as a person on a stock
# Debian 12 desktop: a user who logged in (a real logind session: `machinectl shell`), no lingering,
# no systemd-oomd. Both must be clean (exit 0, no `fix` line): docs/guest.md.
as_tester res doctor > "$out/doctor-tester.txt" 2>&1; echo $? > "$out/doctor-tester.rc"
echo "guest: res doctor as tester: rc $(cat "$out/doctor-tester.rc")"; cat "$out/doctor-tester.txt"

if [ -f "$job/facts" ]; then
# systemd-oomd on res's jobs slice (ManagedOOMMemoryPressure=kill, res serve installed it above): a
# process in that slice throttled at a MemoryHigh of its own (the stall is memory pressure, `full`
# near 100 %) for up to 60 s: how long until oomd ends it (rc 124: it did not), and what oomd logged.
t0=$(date +%s.%N)
as_tester timeout 60 systemd-run --user --quiet --scope --slice=agents-jobs.slice -p MemoryHigh=64M -p MemorySwapMax=0 \
  /usr/bin/python3 /home/tester/res/tests/systemd/throttled_alloc.py > /dev/null 2>&1
rc=$?
echo "guest: fact: a process in agents-jobs.slice throttled at MemoryHigh=64M: ended rc $rc after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
echo "guest: fact: systemd-oomd said: $(journalctl -u systemd-oomd --no-pager -o cat 2>/dev/null | grep -i kill | tail -2 | tr '\n' ' ')"
echo "guest: fact: oomctl dump, what it watches: $(oomctl --no-pager dump 2>&1 | grep -E 'Path:|Pressure Limit' | tr -s ' \n' ' ' | cut -c1-600)"
fi

useradd -m -s /bin/bash stock
# (masked for the while: a user manager's connection to its socket would start it again)
systemctl mask --runtime --now systemd-oomd.socket systemd-oomd.service > /dev/null 2>&1
timeout 120 machinectl --quiet shell stock@.host /bin/bash -c \
  'cd ~ && /opt/venv/bin/res doctor > /tmp/doctor-stock.txt 2>&1; echo $? > /tmp/doctor-stock.rc; loginctl --no-pager show-user stock -p Linger -p State' < /dev/null
cp /tmp/doctor-stock.txt /tmp/doctor-stock.rc "$out/" 2>/dev/null || echo 2 > "$out/doctor-stock.rc"
echo "guest: res doctor as a stock login (no lingering, no systemd-oomd): rc $(cat "$out/doctor-stock.rc")"; cat "$out/doctor-stock.txt" 2>/dev/null
systemctl unmask --runtime systemd-oomd.socket systemd-oomd.service > /dev/null 2>&1
systemctl start systemd-oomd.socket systemd-oomd.service

mapfile -t args < "$job/pytest-args"
cd /home/tester/res
# The facts above leave the machine's memory pressure high for a while (a throttled process was alone
# on it): the tests start once `full avg10` is under 1 % again.
for _ in $(seq 1 120); do
  awk '/^full/ { split($2, a, "="); exit !(a[2] < 1.0) }' /proc/pressure/memory && break
  sleep 1
done
echo "guest: memory pressure before the tests: $(grep full /proc/pressure/memory)"
# pytest as tester in a login session (machinectl shell: logind puts it in session-N.scope and sets its
# bus and runtime directory), where a person's shell is: an agent session started there is in a scope
# res may move into the agents slice (not in this unit's system service).
if [ "${#args[@]}" -gt 0 ]; then
  printf '%q ' "${args[@]}" > /tmp/pytest-args.sh && chmod 644 /tmp/pytest-args.sh
  timeout 3600 machinectl --quiet shell tester@.host /bin/bash -c \
    'cd ~/res && PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE= eval "python -m pytest -q -p no:cacheprovider $(cat /tmp/pytest-args.sh)" > /tmp/pytest.txt 2>&1; echo $? > /tmp/pytest.rc' < /dev/null
  cp /tmp/pytest.txt "$out/pytest.txt"; cp /tmp/pytest.rc "$out/pytest.rc" 2>/dev/null || echo 2 > "$out/pytest.rc"
  echo "guest: pytest rc $(cat "$out/pytest.rc")"
fi

# `guest.py crowd`: bench/crowd.py as tester on this desktop. Its suites' venv is made here from the
# wheels and sdists the host brought (the guest has no network), where crowd.py looks (CROWD_CACHE).
if [ -f "$job/crowd-args" ]; then
  mapfile -t cargs < "$job/crowd-args"
  c=/home/tester/crowd-cache
  mkdir -p "$c/src" && chown -R tester: "$c"
  as_tester bash -c "python3 -m venv $c/venv && $c/venv/bin/pip install -q --no-index --find-links $job/crowd/wheels \
    $job/crowd/wheels/*.whl && for f in $job/crowd/dl/*; do tar -xzf \"\$f\" -C $c/src; done && cp $job/crowd/want.json $c/installed.json"
  echo "guest: crowd venv: rc $?"
  as_tester env CROWD_CACHE="$c" /opt/venv/bin/python bench/crowd.py "${cargs[@]}" > "$out/crowd.txt" 2>&1
  echo $? > "$out/crowd.rc"
  echo "guest: crowd rc $(cat "$out/crowd.rc")"
fi
