"""An agent session's memory growing past a MemoryHigh, with no swap: every new page over the line is
paid for in throttling (the kernel sleeps the allocation), and the stall is memory pressure in its
cgroup and every cgroup above it. A window of 320 MB, renewed 8 MB at a time, until it is stopped.
Run by tests/systemd/test_cgroup_v2.py and by the guest tier's facts (tests/guest/inside.sh)."""
held = []
while True:
    b = bytearray(8 << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    held.append(b)
    if len(held) > 40:
        held.pop(0)
