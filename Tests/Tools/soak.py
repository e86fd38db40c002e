#!/usr/bin/python3
"""soak: the built autosaved under sustained load, then checked.

Usage:
    /usr/bin/python3 soak.py --daemon PATH [--minutes M] [options]
    /usr/bin/python3 soak.py outside ROOT STATE STOP   (the outside editor, started by the soak)

One daemon on a fresh root in a temporary directory (its edit journal in the mode
JOURNAL, the default configuration's unless given). CLIENTS connections edit
DOCUMENTS documents over the control socket (text documents by `append`, `replace` and
`set`, JSON documents by `patch`, package documents — one in a hundred, made on disk
before the daemon starts — by `put-member` and `remove-member`; a few shared documents
get `append`s from every client), pipelining WINDOW requests each, while the daemon saves (a short quiet period,
so saves run all the time), clients ask for `save` and `save-all` with `wait`, and `get`
their documents back; three subscribers listen to every event; the configuration is
rewritten and reloaded (SIGHUP and the `reload` command in turn); and another program
(this script in `outside` mode, a separate process) creates, rewrites (in place and by
rename over), renames and removes files of its own under `outside/` in the root, never
through the daemon.

Each client is the only one to edit its own documents, and a connection's requests are
answered in order, so the client knows what every acknowledged edit left in the
document: the model is what the replies said was applied. A shared document's model is
the set of acknowledged appends, in any order. Checks, afterwards:

  - every reply was ok, and every `get` during the run returned the model;
  - after `sync` and `save-all` with `wait`: `get` of every document returns the model
    (a package: its member list, and each member's text);
  - the outside program's files: `list` has every one under its current name and none
    under a name it renamed or removed, and `get` returns what the file holds;
  - the subscribers stayed connected, saw saves, saw the outside program's changes
    (`changed-on-disk`, `renamed`, `closed`), and never an event about a client's
    document other than `saved` (the daemon's own saves are not outside changes);
  - every reload was answered or logged as done, none refused;
  - `status`: no failed save, nothing unsaved;
  - memory, sampled every SAMPLE seconds after the warm-up (the first WARMUP fraction of
    the run), less the growth of the text documents' total length (the texts and the JSON
    documents begin as edits would have left them, so their total stays about level): the bytes the allocator
    holds in use (`status`'s `memory.allocated_bytes`, less the journal's `memory_bytes`) grew at most ALLOCATED_LIMIT
    percent from the first third of the samples to the last (medians), which a leak
    fails; resident memory (VmRSS) at most RSS_LIMIT percent (the lowest sample of each
    third, the floor the allocator's trims come back to; a third without a trim reads up
    to a quarter higher), which a trimmer that stopped trimming fails;
  - the daemon's descriptors (/proc/PID/fd) after every client disconnected are as many
    as before the soak (after the documents were created);
  - SIGTERM: the daemon exits 0, and every document's file holds the model (a package's
    directory: exactly the model's members, each with its text); no temporary file is left.

Prints every figure; exits 1 when a check fails, 2 when the run could not be set up.
"""

import argparse
import asyncio
import collections
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# ---------------------------------------------------------------------------------
# The outside program


def outside_main(root, state_path, stop_path, rate=25.0, files=100, seed=1):
    """Edits files under ROOT/outside until STOP_PATH exists, then writes its state."""
    rnd = random.Random(seed)
    directory = os.path.join(root, "outside")
    os.makedirs(directory, exist_ok=True)
    current = {}  # name (relative to root) -> content
    gone = []
    counts = collections.Counter()
    serial = 0

    def content(name):
        return "outside %s %d %s\n" % (name, rnd.randrange(1 << 30), "x" * rnd.randrange(0, 300))

    def new_name():
        nonlocal serial
        serial += 1
        return "outside/o%05d.txt" % serial

    def write_in_place(name, text):
        with open(os.path.join(root, name), "w") as f:
            f.write(text)

    for _ in range(files // 2):
        name = new_name()
        current[name] = content(name)
        write_in_place(name, current[name])
        counts["create"] += 1

    interval = 1.0 / rate
    next_at = time.monotonic()
    while not os.path.exists(stop_path):
        next_at += interval
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        roll = rnd.random()
        if not current or (roll < 0.15 and len(current) < files):
            name = new_name()
            current[name] = content(name)
            write_in_place(name, current[name])
            counts["create"] += 1
        elif roll < 0.45:
            name = rnd.choice(list(current))
            current[name] = content(name)
            write_in_place(name, current[name])
            counts["rewrite in place"] += 1
        elif roll < 0.75:
            # As editors save: a temporary the daemon ignores (`.*.swp`), renamed over.
            name = rnd.choice(list(current))
            current[name] = content(name)
            temporary = os.path.join(root, "outside", "." + os.path.basename(name) + ".swp")
            with open(temporary, "w") as f:
                f.write(current[name])
            os.rename(temporary, os.path.join(root, name))
            counts["replace by rename"] += 1
        elif roll < 0.92:
            name = rnd.choice(list(current))
            to = new_name()
            os.rename(os.path.join(root, name), os.path.join(root, to))
            current[to] = current.pop(name)
            gone.append(name)
            counts["rename"] += 1
        elif len(current) > files // 4:
            name = rnd.choice(list(current))
            os.unlink(os.path.join(root, name))
            del current[name]
            gone.append(name)
            counts["remove"] += 1
    with open(state_path + ".tmp", "w") as f:
        json.dump({"current": current, "gone": gone, "counts": counts}, f)
    os.rename(state_path + ".tmp", state_path)


# ---------------------------------------------------------------------------------
# The soak


class Failures:
    def __init__(self):
        self.items = collections.defaultdict(list)

    def add(self, check, detail):
        self.items[check].append(detail)

    def __bool__(self):
        return bool(self.items)


TEXT_RESET = 1500  # a text longer than this is set anew by its next edit


def text_edit(rnd, text, client, serial):
    """A request for a text document and the text it leaves."""
    token = "c%d.%d;" % (client, serial)
    roll = rnd.random()
    if len(text) > TEXT_RESET or roll < 0.05:
        new = token * rnd.randrange(1, 20) + "\n"
        return {"cmd": "set", "text": new}, new
    if roll < 0.5 or not text:
        new = text + token + "\n"
        return {"cmd": "append", "text": token + "\n"}, new
    offset = rnd.randrange(0, len(text) + 1)
    length = rnd.randrange(0, min(24, len(text) - offset) + 1)
    replacement = token if rnd.random() < 0.8 else ""
    new = text[:offset] + replacement + text[offset + length :]
    return {"cmd": "replace", "offset": offset, "length": length, "text": replacement}, new


def json_edit(rnd, value, client, serial):
    """A merge patch for a JSON document (an object of scalars) and the value it leaves."""
    patch = {}
    new = dict(value)
    for _ in range(rnd.randrange(1, 4)):
        key = "k%d" % rnd.randrange(20)
        roll = rnd.random()
        if roll < 0.2:
            patch[key] = None
            new.pop(key, None)
        elif roll < 0.6:
            patch[key] = serial
            new[key] = serial
        else:
            patch[key] = "c%d.%d" % (client, serial)
            new[key] = patch[key]
    return {"cmd": "patch", "patch": patch}, new


class PackageModel(dict):
    """A package document's model: member path -> text."""


PACKAGE_MEMBERS = ["m%d.txt" % i for i in range(4)] + ["sub/n%d.txt" % i for i in range(3)]


def package_edit(rnd, members, client, serial):
    """A `put-member` or `remove-member` request for a package and the members it leaves."""
    new = PackageModel(members)
    if members and rnd.random() < 0.25:
        member = rnd.choice(sorted(members))
        del new[member]
        return {"cmd": "remove-member", "member": member}, new
    member = rnd.choice(PACKAGE_MEMBERS)
    text = ("c%d.%d;" % (client, serial)) * rnd.randrange(1, 6) + "\n"
    new[member] = text
    return {"cmd": "put-member", "member": member, "text": text}, new


class Soak:
    def __init__(self, options):
        self.o = options
        self.rnd = random.Random(options.seed)
        self.failures = Failures()
        self.work = tempfile.mkdtemp(prefix="autosaved-soak.")
        self.root = os.path.join(self.work, "root")
        self.socket = os.path.join(self.work, "control.sock")
        self.config = os.path.join(self.work, "autosaved.conf")
        self.daemon_log = os.path.join(self.work, "autosaved.log")
        os.makedirs(self.root)
        # The documents: DOCUMENTS in 100 directories, one in ten JSON, one in a hundred a
        # package, SHARED of them shared.
        self.shared = ["shared/s%02d.txt" % i for i in range(options.shared)]
        own = options.documents - options.shared
        self.docs = []
        for k in range(own):
            extension = "json" if k % 10 == 9 else "package" if k % 100 == 50 else "txt"
            self.docs.append("d%02d/doc%05d.%s" % (k % 100, k, extension))
        self.model = {}  # doc -> acknowledged text (str) or value (dict)
        self.shared_model = {doc: collections.Counter() for doc in self.shared}
        self.uncertain = set()
        self.counts = collections.Counter()
        self.gets_checked = 0
        self.edited = set()
        self.events = [collections.Counter() for _ in range(3)]
        self.client_doc_events = collections.Counter()
        self.subscribers_open = [False] * 3
        self.reloads = collections.Counter()
        self.rss = []  # (seconds since the soak began, kB)
        self.allocated = []  # (seconds since the soak began, kB): status's memory.allocated_bytes less journal.memory_bytes
        self.backlog = []  # (seconds, documents unsaved, saves running, journal records no save covers) at each sample
        self.text_bytes = 0  # the text documents' acknowledged lengths, summed
        self.text_samples = []  # (seconds since the soak began, text_bytes) beside each VmRSS sample
        self.stop = False
        self.quiet_periods = ["200ms", "500ms"]
        # The packages, made on disk before the daemon starts: it opens them as it finds them.
        for doc in self.docs:
            if doc.endswith(".package"):
                self.model[doc] = self.first_package(doc)
                os.makedirs(os.path.join(self.root, doc))
                for member, text in self.model[doc].items():
                    path = os.path.join(self.root, doc, member)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "w") as f:
                        f.write(text)

    # -- the daemon

    def write_config(self, quiet):
        with open(self.config + ".tmp", "w") as f:
            f.write(
                "[Store]\nRoot=%s\n[Autosave]\nQuietPeriod=%s\nMaxDelay=3s\nMaxConcurrentSaves=4\n"
                "[Watch]\nEnabled=yes\n[Control]\nSocket=%s\nMaxConnections=1024\n[Log]\nLevel=notice\n"
                % (self.root, quiet, self.socket)
            )
            if self.o.journal:
                f.write("[Journal]\nMode=%s\n" % self.o.journal)
        os.rename(self.config + ".tmp", self.config)

    def start_daemon(self):
        self.write_config(self.quiet_periods[0])
        log = open(self.daemon_log, "w")
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        self.process = subprocess.Popen(
            [self.o.daemon, "--config", self.config], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit("soak: autosaved exited with %s at start-up; log in %s" % (self.process.returncode, self.daemon_log))
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.socket)
                s.close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("soak: autosaved's socket did not appear within 60 s")

    def descriptors(self):
        return sorted(os.listdir("/proc/%d/fd" % self.process.pid), key=int)

    def descriptor_targets(self):
        targets = {}
        for fd in self.descriptors():
            try:
                targets[fd] = os.readlink("/proc/%d/fd/%s" % (self.process.pid, fd))
            except OSError:
                pass
        return targets

    def vmrss(self):
        with open("/proc/%d/status" % self.process.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    # -- the protocol

    async def connect(self):
        return await asyncio.open_unix_connection(self.socket, limit=256 * 1024 * 1024)

    async def call(self, conn, request):
        reader, writer = conn
        writer.write((json.dumps(request) + "\n").encode())
        await writer.drain()
        while True:
            line = await reader.readline()
            if not line:
                raise ConnectionError("the daemon closed the connection")
            reply = json.loads(line)
            if "event" not in reply:
                return reply

    async def pipeline(self, conn, requests):
        """Sends every request (a window at a time) and returns the replies in order."""
        reader, writer = conn
        replies = []
        window = 64
        for start in range(0, len(requests), window):
            chunk = requests[start : start + window]
            writer.write("".join(json.dumps(r) + "\n" for r in chunk).encode())
            await writer.drain()
            while len(replies) < start + len(chunk):
                line = await reader.readline()
                if not line:
                    raise ConnectionError("the daemon closed the connection")
                reply = json.loads(line)
                if "event" not in reply:
                    replies.append(reply)
        return replies

    # -- phases

    def first_json(self, doc):
        """A JSON document's first value: what `json_edit` leaves after a number of patches
        drawn from its own random stream. Patches add members until about four in five of
        the twenty keys are there; documents that all began with one member would grow
        through the first minutes of the run (1,000 of them by ≈ 1.8 MB, measured), and
        memory with them."""
        rnd = random.Random("%d %s json" % (self.o.seed, doc))
        value = {"k0": 0}
        for serial in range(rnd.randrange(40, 120)):
            value = json_edit(rnd, value, -1, serial)[1]
        return value

    def first_package(self, doc):
        """A package's first members: what `package_edit` leaves after a number of edits
        drawn from its own random stream."""
        rnd = random.Random("%d %s package" % (self.o.seed, doc))
        members = PackageModel({"m0.txt": doc + "\n"})
        for serial in range(rnd.randrange(5, 30)):
            members = package_edit(rnd, members, -1, serial)[1]
        return members

    def first_text(self, doc):
        """A text document's first text: what `text_edit` leaves after a number of edits
        drawn from its own random stream. Edits grow a text until it is set anew, so
        documents that all began short would grow through the first part of the run, and
        memory with them; begun where edits keep them, the documents' total stays level."""
        rnd = random.Random("%d %s" % (self.o.seed, doc))
        text = doc + "\n"
        for serial in range(rnd.randrange(40, 120)):
            text = text_edit(rnd, text, -1, serial)[1]
        return text

    async def populate(self):
        conns = [await self.connect() for _ in range(8)]
        jobs = []
        for i, conn in enumerate(conns):
            docs = [d for d in self.docs[i :: len(conns)] if not d.endswith(".package")] + self.shared[i :: len(conns)]
            requests = []
            for doc in docs:
                if doc.endswith(".json"):
                    requests.append({"cmd": "set", "doc": doc, "json": self.first_json(doc)})
                else:
                    requests.append({"cmd": "set", "doc": doc, "text": "" if doc in self.shared else self.first_text(doc)})
            jobs.append((docs, requests, conn))
        results = await asyncio.gather(*(self.pipeline(conn, requests) for _, requests, conn in jobs))
        for (docs, _, _), replies in zip(jobs, results):
            for doc, reply in zip(docs, replies):
                if not reply.get("ok"):
                    self.failures.add("populate", "%s: %s" % (doc, reply))
                    self.uncertain.add(doc)
                elif doc.endswith(".json"):
                    self.model[doc] = self.first_json(doc)
                elif doc not in self.shared:
                    self.model[doc] = self.first_text(doc)
        self.text_bytes = sum(len(text) for text in self.model.values() if isinstance(text, str))
        reply = await self.call(conns[0], {"cmd": "save-all", "wait": True})
        if not reply.get("ok"):
            self.failures.add("populate", "save-all: %s" % reply)
        for _, writer in conns:
            writer.close()
            await writer.wait_closed()

    async def client(self, index, deadline):
        rnd = random.Random(self.o.seed * 1000 + index)
        mine = [doc for k, doc in enumerate(self.docs) if k % self.o.clients == index]
        predicted = {doc: self.model[doc] for doc in mine if doc in self.model}
        mine = [doc for doc in mine if doc in predicted]
        reader, writer = await self.connect()
        inflight = collections.deque()
        serial = 0
        request_id = 0

        def next_request():
            nonlocal serial
            serial += 1
            roll = rnd.random()
            if roll < 0.002:
                doc = rnd.choice(self.shared)
                token = "c%d.%d" % (index, serial)
                return {"cmd": "append", "doc": doc, "text": token + "\n"}, ("shared", doc, token)
            if not mine:
                return {"cmd": "status"}, ("status",)
            doc = rnd.choice(mine)
            if roll < 0.012:
                if isinstance(predicted[doc], PackageModel):
                    return {"cmd": "get", "doc": doc, "members": True}, ("get", doc, sorted(predicted[doc]))
                return {"cmd": "get", "doc": doc}, ("get", doc, predicted[doc])
            if roll < 0.017:
                return {"cmd": "save", "doc": doc, "wait": True}, ("save", doc)
            if roll < 0.01702:
                return {"cmd": "save-all", "wait": True}, ("save-all",)
            if isinstance(predicted[doc], PackageModel):
                request, new = package_edit(rnd, predicted[doc], index, serial)
            elif doc.endswith(".json"):
                request, new = json_edit(rnd, predicted[doc], index, serial)
            else:
                request, new = text_edit(rnd, predicted[doc], index, serial)
            request["doc"] = doc
            predicted[doc] = new
            return request, ("edit", doc, new)

        while True:
            while len(inflight) < self.o.window and not self.stop and time.monotonic() < deadline:
                request, expectation = next_request()
                request_id += 1
                request["id"] = request_id
                writer.write((json.dumps(request) + "\n").encode())
                inflight.append((request, expectation))
            if not inflight:
                break
            if writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()
            line = await reader.readline()
            if not line:
                self.failures.add("connections", "client %d: the daemon closed the connection" % index)
                break
            reply = json.loads(line)
            if "event" in reply:
                continue
            request, expectation = inflight.popleft()
            self.counts["replies"] += 1
            self.counts[request["cmd"]] += 1
            if reply.get("id") != request["id"] or not reply.get("ok"):
                self.counts["errors"] += 1
                self.failures.add("replies", "%s -> %s" % (json.dumps(request)[:200], json.dumps(reply)[:300]))
                if len(expectation) > 1 and expectation[0] in ("edit", "get"):
                    doc = expectation[1]
                    self.uncertain.add(doc)
                    if doc in mine:
                        mine.remove(doc)
                continue
            kind = expectation[0]
            if kind == "edit":
                if isinstance(expectation[2], str):
                    self.text_bytes += len(expectation[2]) - len(self.model[expectation[1]])
                self.model[expectation[1]] = expectation[2]
                self.edited.add(expectation[1])
            elif kind == "shared":
                self.shared_model[expectation[1]][expectation[2]] += 1
                self.text_bytes += len(expectation[2]) + 1
            elif kind == "get":
                self.gets_checked += 1
                got = reply.get("members", reply.get("text", reply.get("value")))
                if isinstance(expectation[2], dict) and isinstance(got, str):
                    got = json.loads(got)
                if got != expectation[2]:
                    self.failures.add("get during the run", "%s: got %r, acknowledged %r" % (expectation[1], got, expectation[2]))
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass

    async def subscriber(self, index, ready):
        reader, writer = await self.connect()
        writer.write(b'{"id":"s","cmd":"subscribe","events":["saved","save-failed","changed-on-disk","conflict","recreated","renamed","closed"]}\n')
        await writer.drain()
        reply = json.loads(await reader.readline())
        if not reply.get("ok"):
            self.failures.add("subscribers", "subscribe refused: %s" % reply)
        self.subscribers_open[index] = True
        ready.set()
        client_docs = set(self.docs) | set(self.shared)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    if not self.stop:
                        self.failures.add("subscribers", "subscriber %d disconnected during the run" % index)
                    self.subscribers_open[index] = False
                    return
                event = json.loads(line)
                kind = event.get("event")
                self.events[index][kind] += 1
                if event.get("doc") in client_docs and kind != "saved":
                    self.client_doc_events[kind] += 1
                    if self.client_doc_events[kind] <= 5:
                        self.failures.add("subscribers", "an event about a client's document: %s" % line.decode().strip())
        except asyncio.CancelledError:
            writer.close()
            raise

    async def reloader(self, deadline):
        conn = await self.connect()
        turn = 0
        while not self.stop and time.monotonic() < deadline - 1:
            await asyncio.sleep(self.o.reload_every)
            if self.stop or time.monotonic() >= deadline - 1:
                break
            turn += 1
            self.write_config(self.quiet_periods[turn % 2])
            if turn % 2:
                os.kill(self.process.pid, signal.SIGHUP)
                self.reloads["SIGHUP"] += 1
            else:
                reply = await self.call(conn, {"cmd": "reload"})
                self.reloads["reload command"] += 1
                if not reply.get("ok"):
                    self.failures.add("reload", "reload: %s" % reply)
        conn[1].close()

    async def sampler(self, started):
        printed = (started, 0)
        # A connection of its own for status, closed when the sampler ends: the descriptor
        # check counts the daemon's sockets after every client has gone.
        conn = await self.connect()
        try:
            while not self.stop:
                now = time.monotonic()
                self.sample(now - started, await self.call(conn, {"cmd": "status"}))
                if now - printed[0] >= 60:
                    replies = self.counts["replies"]
                    print("soak: %4.0f s: %d requests answered (%.0f/s in the last minute), VmRSS %d kB, %d descriptors"
                          % (now - started, replies, (replies - printed[1]) / (now - printed[0]), self.rss[-1][1],
                             len(self.descriptors())), flush=True)
                    printed = (now, replies)
                await asyncio.sleep(self.o.sample)
        finally:
            conn[1].close()

    async def settled_descriptors(self):
        """The daemon's descriptors once every client's connection is closed but the one
        asking: it closes a connection's socket when it reads the end of file, a moment
        after the client, and counts the connection out (`status`'s `connections`) only
        after closing it. Both counts (before and after the soak) include that one socket."""
        conn = await self.connect()
        try:
            deadline = time.monotonic() + 20
            while True:
                connections = (await self.call(conn, {"cmd": "status"})).get("connections")
                if connections == 1:
                    return self.descriptor_targets()
                if time.monotonic() > deadline:
                    self.failures.add("descriptors", "%s connections still open 20 s after every client closed"
                                      % connections)
                    return self.descriptor_targets()
                await asyncio.sleep(0.05)
        finally:
            conn[1].close()

    async def soak(self):
        fd_before = await self.settled_descriptors()
        status_before = await self.status()
        ready = [asyncio.Event() for _ in range(3)]
        subscribers = [asyncio.create_task(self.subscriber(i, ready[i])) for i in range(3)]
        for event in ready:
            await event.wait()
        stop_path = os.path.join(self.work, "outside.stop")
        state_path = os.path.join(self.work, "outside.json")
        outside = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "outside", self.root, state_path, stop_path, str(self.o.seed)]
        )
        started = time.monotonic()
        deadline = started + self.o.minutes * 60
        sampler = asyncio.create_task(self.sampler(started))
        reloader = asyncio.create_task(self.reloader(deadline))
        await asyncio.gather(*(self.client(i, deadline) for i in range(self.o.clients)))
        elapsed = time.monotonic() - started
        self.sample(elapsed, await self.status())
        self.stop = True
        await reloader
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        open(stop_path, "w").close()
        outside.wait(timeout=60)
        with open(state_path) as f:
            outside_state = json.load(f)
        status_after = await self.status()
        return fd_before, status_before, status_after, elapsed, subscribers, outside_state

    def sample(self, at, status):
        """One memory sample, `at` seconds into the soak: resident memory, the texts'
        total and the bytes in use that `status` (a reply to it) gives."""
        self.rss.append((at, self.vmrss()))
        self.text_samples.append((at, self.text_bytes))
        self.allocated.append((at, self.in_use(status)))
        journal = status.get("journal") or {}
        # How far the slowest subscriber is behind: the daemon's saves less the `saved`
        # events it has read (the daemon holds the rest for it, up to its limit).
        seen = min((counts["saved"] for counts in self.events), default=0)
        self.backlog.append((at, status.get("unsaved", 0), status.get("saving", 0), journal.get("unsaved_records", 0),
                             journal.get("memory_bytes", 0) // 1024, status.get("saves", 0) - seen,
                             journal.get("bytes", 0) // 1024, journal.get("segments", 0)))

    @staticmethod
    def in_use(status):
        """kB the allocator holds in use, less the edit journal's buffers (a pool that
        fills up to a bound of its own: JOURNAL.md)."""
        memory = status.get("memory") or {}
        journal = status.get("journal") or {}
        return (memory.get("allocated_bytes", 0) - journal.get("memory_bytes", 0)) // 1024

    async def status(self):
        conn = await self.connect()
        reply = await self.call(conn, {"cmd": "status"})
        conn[1].close()
        return reply

    async def check(self, outside_state):
        conn = await self.connect()
        reply = await self.call(conn, {"cmd": "sync"})
        if not reply.get("ok"):
            self.failures.add("sync", str(reply))
        # The outside program's files, before any get can open one.
        listed = await self.call(conn, {"cmd": "list"})
        names = {d["doc"] for d in listed.get("documents", [])}
        self.listed_documents = len(names)
        missing = [n for n in outside_state["current"] if n not in names]
        stale = [n for n in outside_state["gone"] if n in names]
        for n in missing[:10]:
            self.failures.add("outside files", "%s is on disk but not open in the daemon" % n)
        for n in stale[:10]:
            self.failures.add("outside files", "%s was renamed or removed but is still open" % n)
        self.outside_missing, self.outside_stale = len(missing), len(stale)
        present = [n for n in outside_state["current"] if n in names]
        replies = await self.pipeline(conn, [{"cmd": "get", "doc": n} for n in present])
        self.outside_mismatched = 0
        for n, reply in zip(present, replies):
            with open(os.path.join(self.root, n)) as f:
                disk = f.read()
            if reply.get("text") != disk:
                self.outside_mismatched += 1
                if self.outside_mismatched <= 10:
                    self.failures.add("outside files", "%s: daemon has %r, file has %r" % (n, reply.get("text", reply)[:80], disk[:80]))
        self.outside_checked = len(present)
        reply = await self.call(conn, {"cmd": "save-all", "wait": True})
        if not reply.get("ok") or reply.get("unsaved") != 0:
            self.failures.add("save-all", str(reply))
        # Every client document, in memory.
        docs = [d for d in self.docs + self.shared if d not in self.uncertain]
        replies = await self.pipeline(
            conn, [dict({"cmd": "get", "doc": d}, **({"members": True} if d.endswith(".package") else {})) for d in docs])
        # A package: each listed member's text.
        for i, (doc, reply) in enumerate(zip(docs, replies)):
            if doc.endswith(".package") and reply.get("ok"):
                members = reply.get("members", [])
                texts = await self.pipeline(conn, [{"cmd": "get", "doc": doc, "member": m} for m in members])
                replies[i] = {"ok": True, "members": {m: t.get("text", t) for m, t in zip(members, texts)}}
        self.memory_mismatched = 0
        for doc, reply in zip(docs, replies):
            if not self.matches(doc, reply.get("members", reply.get("text", reply.get("value"))) if reply.get("ok") else reply):
                self.memory_mismatched += 1
                if self.memory_mismatched <= 10:
                    self.failures.add("documents in memory", "%s: %s" % (doc, self.describe(doc, reply)))
        self.memory_checked = len(docs)
        status = await self.call(conn, {"cmd": "status"})
        conn[1].close()
        await conn[1].wait_closed()
        return status

    def matches(self, doc, got):
        if doc in self.shared:
            if not isinstance(got, str):
                return False
            return collections.Counter(line for line in got.split("\n") if line) == self.shared_model[doc]
        expected = self.model[doc]
        if isinstance(expected, PackageModel):
            return isinstance(got, dict) and dict(got) == dict(expected)
        if isinstance(expected, dict):
            if isinstance(got, str):
                try:
                    got = json.loads(got)
                except ValueError:
                    return False
            return got == expected
        return got == expected

    def describe(self, doc, reply):
        expected = self.shared_model[doc] if doc in self.shared else self.model.get(doc)
        return "got %s; acknowledged %s" % (json.dumps(reply)[:200], json.dumps(expected)[:200])

    def check_disk(self):
        mismatched = 0
        for doc in self.docs + self.shared:
            if doc in self.uncertain:
                continue
            try:
                if doc.endswith(".package"):
                    text = {}
                    top = os.path.join(self.root, doc)
                    for directory, _, files in os.walk(top):
                        for name in files:
                            with open(os.path.join(directory, name)) as f:
                                text[os.path.relpath(os.path.join(directory, name), top)] = f.read()
                else:
                    with open(os.path.join(self.root, doc)) as f:
                        text = f.read()
            except OSError as error:
                text = error
            if not self.matches(doc, text):
                mismatched += 1
                if mismatched <= 10:
                    self.failures.add("documents on disk", "%s: holds %r" % (doc, str(text)[:200]))
        temporaries = []
        for directory, _, files in os.walk(self.root):
            temporaries += [os.path.join(directory, f) for f in files if ".autosave-" in f]
        for t in temporaries[:10]:
            self.failures.add("documents on disk", "temporary file left: %s" % t)
        return mismatched, len(temporaries)

    async def run(self):
        o = self.o
        packages = sum(1 for d in self.docs if d.endswith(".package"))
        print("soak: %s, %s min, %d clients (window %d), %d documents (%d shared, %d packages), journal %s, work directory %s"
              % (o.daemon, o.minutes, o.clients, o.window, o.documents, o.shared, packages,
                 o.journal or "in its default mode", self.work), flush=True)
        self.start_daemon()
        print("soak: autosaved pid %d, %d descriptors at start" % (self.process.pid, len(self.descriptors())), flush=True)
        t = time.monotonic()
        await self.populate()
        print("soak: %d documents created and saved in %.1f s; VmRSS %d kB" % (len(self.model) + len(self.shared), time.monotonic() - t, self.vmrss()), flush=True)
        fd_before, status_before, status_after, elapsed, subscribers, outside_state = await self.soak()
        t = time.monotonic()
        status = await self.check(outside_state)
        check_seconds = time.monotonic() - t
        # Descriptors once every client has gone (subscribers too).
        for task in subscribers:
            task.cancel()
        await asyncio.gather(*subscribers, return_exceptions=True)
        fd_after = await self.settled_descriptors()
        # SIGTERM, then the files.
        self.process.send_signal(signal.SIGTERM)
        try:
            exit_status = self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            exit_status = "killed after 120 s"
        disk_mismatched, temporaries = self.check_disk()
        self.report(fd_before, fd_after, status_before, status_after, status, elapsed, outside_state,
                    exit_status, disk_mismatched, temporaries, check_seconds)
        return 1 if self.failures else 0

    def report(self, fd_before, fd_after, status_before, status_after, status, elapsed, outside_state,
               exit_status, disk_mismatched, temporaries, check_seconds):
        o = self.o
        c = self.counts
        edits = sum(c[k] for k in ("append", "replace", "set", "patch", "put-member", "remove-member"))
        print("--- load (%.1f s)" % elapsed)
        print("requests answered: %d (%.0f/s); edits %d (%.0f/s): append %d, replace %d, set %d, patch %d, "
              "put-member %d, remove-member %d; get %d, save --wait %d, save-all --wait %d; errors %d"
              % (c["replies"], c["replies"] / elapsed, edits, edits / elapsed, c["append"], c["replace"], c["set"],
                 c["patch"], c["put-member"], c["remove-member"], c["get"], c["save"], c["save-all"], c["errors"]))
        saves = status_after.get("saves", 0) - status_before.get("saves", 0)
        print("saves during the soak: %d (%.0f/s); documents edited: %d of %d; shared appends: %d"
              % (saves, saves / elapsed, len(self.edited), len(self.docs),
                 sum(sum(m.values()) for m in self.shared_model.values())))
        print("reloads: %d by SIGHUP, %d by the reload command; logged as done: %d; refused: %d"
              % (self.reloads["SIGHUP"], self.reloads["reload command"], self.logged("configuration reloaded"),
                 self.logged("reload refused")))
        print("outside program: %s" % ", ".join("%s %d" % kv for kv in sorted(outside_state["counts"].items())))
        for i, events in enumerate(self.events):
            print("subscriber %d: %s" % (i, ", ".join("%s %d" % kv for kv in sorted(events.items())) or "no events"))
        print("--- checks")
        print("gets checked during the run: %d" % self.gets_checked)
        print("documents in memory matching the model: %d of %d (excluded after an error: %d)"
              % (self.memory_checked - self.memory_mismatched, self.memory_checked, len(self.uncertain)))
        print("documents on disk after SIGTERM matching the model: %d of %d; temporaries left: %d"
              % (self.memory_checked - disk_mismatched, self.memory_checked, temporaries))
        print("outside files: %d on disk, %d open with the file's contents, %d missing, %d stale names, %d mismatched"
              % (len(outside_state["current"]), self.outside_checked - self.outside_mismatched,
                 self.outside_missing, self.outside_stale, self.outside_mismatched))
        print("status at the end: documents %s, unsaved %s, failed %s, saves %s; check took %.1f s"
              % (status.get("documents"), status.get("unsaved"), status.get("failed"), status.get("saves"), check_seconds))
        if status.get("failed") or status.get("unsaved"):
            self.failures.add("status", "failed %s, unsaved %s" % (status.get("failed"), status.get("unsaved")))
        print("daemon exit status after SIGTERM: %s" % exit_status)
        if exit_status != 0:
            self.failures.add("exit", "autosaved exited with %s (log: %s)" % (exit_status, self.daemon_log))
        # Subscribers and reloads.
        for i, events in enumerate(self.events):
            if events["saved"] == 0:
                self.failures.add("subscribers", "subscriber %d saw no save" % i)
            if outside_state["counts"].get("rename") and events["renamed"] == 0:
                self.failures.add("subscribers", "subscriber %d saw none of the outside renames" % i)
            if events["changed-on-disk"] == 0:
                self.failures.add("subscribers", "subscriber %d saw none of the outside rewrites" % i)
        reloads = self.reloads["SIGHUP"] + self.reloads["reload command"]
        if self.logged("configuration reloaded") != reloads or self.logged("reload refused"):
            self.failures.add("reload", "%d reloads asked, %d logged as done, %d refused"
                              % (reloads, self.logged("configuration reloaded"), self.logged("reload refused")))
        if reloads == 0:
            self.failures.add("reload", "no reload during the run")
        # Memory: what the allocator holds in use (status's memory.allocated_bytes), which
        # only memory still in use raises, and resident memory, which the allocator's
        # trims make a sawtooth of.
        warm = [s for s in self.rss if s[0] >= o.warmup * elapsed]
        warm_allocated = [s for s in self.allocated if s[0] >= o.warmup * elapsed]
        if len(warm) >= 10 and len(warm_allocated) >= 10:
            window = max(5, len(warm) // 3)
            # What the documents hold is memory in use, not a leak: the growth of the texts'
            # total over the same windows (means) is taken off before the limits apply.
            texts = self.text_samples[len(self.text_samples) - len(warm) :]
            text_start = sum(b for _, b in texts[:window]) / window / 1024
            text_end = sum(b for _, b in texts[-window:]) / window / 1024
            text_growth = max(0.0, text_end - text_start)
            # Bytes in use: the median of the first and of the last third after the warm-up.
            # Requests and saves in flight make them wander a little around what the
            # documents and the daemon's state hold; a leak raises them for good.
            a_window = max(5, len(warm_allocated) // 3)
            a_start = statistics.median(kb for _, kb in warm_allocated[:a_window])
            a_end = statistics.median(kb for _, kb in warm_allocated[-a_window:])
            a_growth = 100.0 * (a_end - a_start - text_growth) / a_start if a_start else 0.0
            print("allocated: %d kB after the warm-up, %d kB at the end (medians of a third each); growth less "
                  "the texts' %+.2f %% (limit %.1f %%); min %d, max %d kB; %d samples"
                  % (a_start, a_end, a_growth, o.allocated_limit, min(kb for _, kb in warm_allocated),
                     max(kb for _, kb in warm_allocated), len(self.allocated)))
            if a_growth > o.allocated_limit:
                self.failures.add("memory", "allocated bytes grew %.2f %% after warm-up (%d -> %d kB; the texts "
                                  "%.0f -> %.0f kB)" % (a_growth, a_start, a_end, text_start, text_end))
            # Resident memory: the lowest sample of a third each, the floor the trims come
            # back to. The trimmer trims once a quarter of what is in use lies free, so a
            # third without a trim reads a tooth up to a quarter above the floor: the limit
            # is for resident memory that runs away from what is in use (a trimmer that no
            # longer trims, fragmentation), the allocated bytes above for leaks.
            start = min(kb for _, kb in warm[:window])
            end = min(kb for _, kb in warm[-window:])
            growth = 100.0 * (end - start - text_growth) / start
            print("VmRSS: %d kB at start of the soak, %d kB after the warm-up (%.0f s), %d kB at the end; "
                  "texts %.0f -> %.0f kB; growth after warm-up, less the texts' %+.2f %% (limit %.1f %%); "
                  "min %d, max %d kB; %d samples"
                  % (self.rss[0][1], start, warm[0][0], end, text_start, text_end, growth, o.rss_limit,
                     min(kb for _, kb in warm), max(kb for _, kb in warm), len(self.rss)))
            step = max(1, len(self.rss) // 12)
            print("VmRSS curve (s: kB): " + ", ".join("%.0f: %d" % s for s in self.rss[::step] + [self.rss[-1]]))
            print("allocated curve (s: kB): "
                  + ", ".join("%.0f: %d" % s for s in self.allocated[::step] + [self.allocated[-1]]))
            print("backlog curve (s: unsaved documents/saves running/journal records no save covers/journal kB/"
                  "saves the slowest subscriber has not read/journal records kB/segments): "
                  + ", ".join("%.0f: %d/%d/%d/%d/%d/%d/%d" % s for s in self.backlog[::step] + [self.backlog[-1]]))
            with open(self.daemon_log, errors="replace") as f:
                trims = [line.strip() for line in f if "memory trimmer:" in line]
            print("daemon at exit: " + (trims[-1] if trims else "no memory trimmer line (it never trimmed)"))
            if growth > o.rss_limit:
                self.failures.add("memory", "VmRSS grew %.2f %% after warm-up (%d -> %d kB; the texts %.0f -> %.0f kB)"
                                  % (growth, start, end, text_start, text_end))
        else:
            self.failures.add("memory", "too few samples after warm-up (%d)" % len(warm))
        print("descriptors: %d before the soak, %d after every client disconnected"
              % (len(fd_before), len(fd_after)))
        if len(fd_after) != len(fd_before):
            before = collections.Counter(fd_before.values())
            after = collections.Counter(fd_after.values())
            self.failures.add("descriptors", "%d before, %d after; new: %s; gone: %s"
                              % (len(fd_before), len(fd_after), dict(after - before), dict(before - after)))
        print("--- result")
        if not self.failures:
            print("soak: every check passed")
        for check, details in self.failures.items.items():
            print("FAILED %s (%d):" % (check, len(details)))
            for d in details[:10]:
                print("  " + d)
        if not self.failures and not o.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            print("soak: work directory kept: %s" % self.work)

    def logged(self, text):
        with open(self.daemon_log, errors="replace") as f:
            return sum(text in line for line in f)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "outside":
        outside_main(sys.argv[2], sys.argv[3], sys.argv[4], seed=int(sys.argv[5]))
        return 0
    p = argparse.ArgumentParser(description="autosaved soak")
    p.add_argument("--daemon", required=True)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--documents", type=int, default=10000)
    p.add_argument("--shared", type=int, default=10)
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--warmup", type=float, default=0.4, help="fraction of the run before memory is measured")
    p.add_argument("--allocated-limit", type=float, default=15.0, help="percent")
    p.add_argument("--rss-limit", type=float, default=25.0, help="percent")
    p.add_argument("--sample", type=float, default=2.0, help="seconds between VmRSS samples")
    p.add_argument("--reload-every", type=float, default=10.0, help="seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--journal", choices=["periodic", "always", "off"], help="[Journal] Mode= (default: the default configuration's)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    options = p.parse_args()
    return asyncio.run(Soak(options).run())


if __name__ == "__main__":
    sys.exit(main())
