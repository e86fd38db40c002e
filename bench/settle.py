"""Waits until autosaved has nothing unsaved and nothing saving (its `status`) and has used
at most 5 % of a CPU over 0.2 s, at most LIMIT seconds; prints the seconds waited.
Used by scripts/bench-matrix and scripts/bench-journal-socket before each Redis run.

Usage: python3 bench/settle.py SOCKET PID LIMIT_SECONDS CLOCK_TICKS_PER_SECOND
"""
import json, socket, sys, time
path, pid, limit, hz = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
def ticks():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
start = time.monotonic()
client = socket.socket(socket.AF_UNIX)
client.settimeout(10)
client.connect(path)
replies = client.makefile("rb")
while True:
    before = ticks()
    client.sendall(b'{"id": 1, "cmd": "status"}\n')
    status = json.loads(replies.readline())
    time.sleep(0.2)
    idle = (ticks() - before) / hz <= 0.01
    if (idle and status.get("unsaved") == 0 and status.get("saving") == 0) or time.monotonic() - start >= limit:
        break
print(f"{time.monotonic() - start:.1f}")
