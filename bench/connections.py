#!/usr/bin/env python3
"""Memory a server holds for each idle client: opens N connections to a Unix socket,
has every one answered once (`PING`, `status`: each has been read and replied to), and
prints the server's resident memory before and after, and per connection.

    connections.py redis|autosaved SOCKET PID [N]
"""
import socket
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for process {pid}")


def main():
    mode, path, pid = sys.argv[1], sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    request = b"*1\r\n$4\r\nPING\r\n" if mode == "redis" else b'{"cmd":"status"}\n'
    before = rss_kib(pid)
    clients = []
    for _ in range(count):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)
        clients.append(client)
    for client in clients:
        client.sendall(request)
    for client in clients:
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = client.recv(65536)
            if not chunk:
                raise SystemExit("the server closed a connection")
            reply += chunk
    time.sleep(0.3)
    after = rss_kib(pid)
    print(f"{mode} {count} {before} {after} {(after - before) / count:.1f}")
    for client in clients:
        client.close()


main()
