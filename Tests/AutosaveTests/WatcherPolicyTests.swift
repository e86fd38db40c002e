import Control
import Foundation
import Journal
import Posix
import Synchronization
import TestSupport
import Testing

@testable import Autosave
@testable import Documents

/// Renames, packages, the `[Conflicts]` and `[Watch]` policies, the watch limit and a
/// root that goes away: real programs on real files, checked through the store.
@Suite("Changes by other programs: renames, policies, limits", .serialized, .timeLimit(.minutes(1)))
struct WatcherPolicyTests {
    let base = WatcherTests()

    func text(_ harness: StoreHarness, _ path: String) async -> String? {
        if case .text(let text)? = try? await harness.store.read(path) { return text }
        return nil
    }

    /// Waits until `condition` holds, looking every 10 ms; a test failure after `timeout`.
    func waitUntil(
        _ what: String, timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation,
        _ condition: () async -> Bool
    ) async {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if await condition() { return }
            try? await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("not within \(timeout): \(what)", sourceLocation: sourceLocation)
    }

    @Test(
        "A document renamed by another program follows its file, unsaved edits and all; a renamed directory takes its documents along"
    )
    func renames() async throws {
        let harness = try await base.harness()
        try Disk.write("saved\n", to: harness.file("a.txt"))
        try FileManager.default.createDirectory(atPath: harness.file("dir/deeper"), withIntermediateDirectories: true)
        try Disk.write("b\n", to: harness.file("dir/deeper/b.txt"))
        try await harness.store.open("a.txt")
        try await harness.store.open("dir/deeper/b.txt")
        try await harness.store.apply(.setText("unsaved a\n"), to: "a.txt")
        try base.sh("mv a.txt renamed.txt && mv dir moved", in: harness)
        await harness.store.sync()
        await #expect(throws: StoreError.notFound("a.txt")) { try await harness.store.info("a.txt") }
        #expect(try await harness.store.info("renamed.txt").state != .clean, "the unsaved edits moved along")
        #expect(await text(harness, "renamed.txt") == "unsaved a\n")
        #expect(await text(harness, "moved/deeper/b.txt") == "b\n")
        await #expect(throws: StoreError.self) { try await harness.store.info("dir/deeper/b.txt") }
        #expect(await harness.log.count { $0 == .renamed(document: "a.txt", to: "renamed.txt") } == 1)
        try await harness.store.save("renamed.txt", wait: true)
        #expect(try harness.text(onDisk: "renamed.txt") == "unsaved a\n")
        #expect(!FileManager.default.fileExists(atPath: harness.file("a.txt")), "the old name is not written again")
        // The watches below the moved directory follow it: a change there is still seen.
        try base.sh("printf 'b2\\n' > moved/deeper/b.txt", in: harness)
        await harness.store.sync()
        #expect(await text(harness, "moved/deeper/b.txt") == "b2\n")
        #expect(await harness.store.watchCounters.overflows == 0)
    }

    @Test(
        "A package with unsaved edits changed by another program: the package keeps their version, the copy holds the edits over it — the member whole, even when it is truncated and written again 30 ms later (the conflict waits for the write to finish)",
        arguments: [
            "printf 'theirs\\n' > book.package/2.txt",
            ": > book.package/2.txt; sleep 0.03; printf 'theirs\\n' > book.package/2.txt",
        ])
    func packageConflict(write: String) async throws {
        let harness = try await base.harness()
        try FileManager.default.createDirectory(atPath: harness.file("book.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("book.package/1.txt"))
        try Disk.write("two\n", to: harness.file("book.package/2.txt"))
        // The setup's own reports handed over first: this test is about the write below.
        await harness.store.sync()
        try await harness.store.open("book.package")
        try await harness.store.apply(.putMember("1.txt", Data("mine\n".utf8)), to: "book.package")
        try base.sh(write, in: harness)
        await harness.store.sync()
        let event = await harness.next { if case .conflict = $0 { true } else { false } }
        guard case .conflict("book.package", let copy, .memory)? = event else {
            Issue.record("no conflict event: \(String(describing: event))")
            return
        }
        #expect(copy.hasPrefix("book (conflict ") && copy.hasSuffix(").package"))
        #expect(try harness.text(onDisk: "book.package/1.txt") == "one\n")
        #expect(try harness.text(onDisk: "book.package/2.txt") == "theirs\n")
        #expect(try harness.text(onDisk: copy + "/1.txt") == "mine\n")
        #expect(try harness.text(onDisk: copy + "/2.txt") == "theirs\n", "the member as the other program left it")
        #expect(try await harness.store.read("book.package", .member("1.txt")) == .data(Data("one\n".utf8)))
        #expect(try await harness.store.info("book.package").state == .clean)
        #expect(await harness.store.watchCounters.conflicts == 1)
    }

    @Test(
        "Keep=memory: the copy of the other program's version waits for it to finish writing the file, and is never the truncated file between its two writes"
    )
    func keepMemorySettles() async throws {
        let harness = try await base.harness { $0.conflictKeep = .memory }
        try Disk.write("original\n", to: harness.file("notes.txt"))
        await harness.store.sync()
        try await harness.store.open("notes.txt")
        try await harness.store.apply(.setText("mine\n"), to: "notes.txt")
        try base.sh(": > notes.txt; sleep 0.03; printf 'theirs\\n' > notes.txt", in: harness)
        await harness.store.sync()
        let event = await harness.next { if case .conflict = $0 { true } else { false } }
        guard case .conflict("notes.txt", let copy, .disk)? = event else {
            Issue.record("no conflict event: \(String(describing: event))")
            return
        }
        #expect(try harness.text(onDisk: copy) == "theirs\n", "their version whole")
        await harness.nextSave(of: "notes.txt")
        #expect(try harness.text(onDisk: "notes.txt") == "mine\n")
        await harness.store.sync()
        #expect(await harness.store.watchCounters.conflicts == 1)
    }

    @Test(
        "A save asked for while a package's conflict waits for the other program's write to settle writes nothing over their member: the conflict is resolved first"
    )
    func noSaveWhileAConflictSettles() async throws {
        let harness = try await base.harness()
        try FileManager.default.createDirectory(atPath: harness.file("book.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("book.package/1.txt"))
        await harness.store.sync()
        try await harness.store.open("book.package")
        try await harness.store.apply(.putMember("1.txt", Data("mine\n".utf8)), to: "book.package")
        try Disk.write("theirs\n", to: harness.file("book.package/1.txt"))
        // The report handed over, the conflict waiting for the write to settle.
        await harness.store.cookieBarrier()
        #expect(await harness.store.settlingConflicts["book.package"]?.lookPending == true)
        // Kept on disk: the package is read again, and the save's caller told so.
        await #expect(throws: StoreError.self) { try await harness.store.save("book.package", wait: true) }
        #expect(try harness.text(onDisk: "book.package/1.txt") == "theirs\n")
        await harness.store.sync()
        #expect(await harness.store.watchCounters.conflicts == 1)
        let copies = try FileManager.default.contentsOfDirectory(atPath: harness.root).filter {
            $0.hasPrefix("book (conflict ")
        }
        #expect(copies.count == 1)
        if let copy = copies.first { #expect(try harness.text(onDisk: copy + "/1.txt") == "mine\n") }
    }

    @Test(
        "A package's member changed by another program right after its save wrote it, reported while the save runs: read again once the save is done"
    )
    func memberChangedDuringItsSave() async throws {
        let harness = try await base.harness()
        try FileManager.default.createDirectory(atPath: harness.file("book.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("book.package/1.txt"))
        try Disk.write("two\n", to: harness.file("book.package/2.txt"))
        await harness.store.sync()
        try await harness.store.open("book.package")
        try await harness.store.apply(.putMember("1.txt", Data("mine\n".utf8)), to: "book.package")
        let package = harness.file("book.package")
        let store = harness.store
        // The other program writes the member the save has just written, and the store
        // takes the report of it before the save is done.
        await store.afterFirstRename(of: package) {
            try Disk.write("theirs\n", to: package + "/1.txt")
        }
        try await store.save("book.package", wait: true)
        await store.setAfterRename(nil)
        #expect(await store.pendingChecks.isEmpty)
        await store.sync()
        #expect(try await store.read("book.package", .member("1.txt")) == .data(Data("theirs\n".utf8)))
        #expect(try await store.info("book.package").state == .clean)
        #expect(try harness.text(onDisk: "book.package/1.txt") == "theirs\n")
    }

    @Test(
        "A package member another program rewrites is read again, whatever its name: one starting with a combining mark (its path cut at the bytes, not the characters), one an ignore pattern matches (the rules choose documents; a package holds every file inside it)",
        arguments: ["\u{301}x", "notes~", "d/.a.txt.swp"])
    func memberRewrittenByAnotherProgram(member: String) async throws {
        let harness = try await base.harness()
        try FileManager.default.createDirectory(atPath: harness.file("p.package"), withIntermediateDirectories: true)
        await harness.store.sync()
        let store = harness.store
        try await store.open("p.package")
        try await store.apply(.putMember(member, Data("mine\n".utf8)), to: "p.package")
        try await store.save("p.package", wait: true)
        await store.sync()
        try Disk.write("theirs\n", to: harness.file("p.package/" + member))
        await store.sync()
        #expect(try await store.read("p.package", .member(member)) == .data(Data("theirs\n".utf8)))
        #expect(try await store.info("p.package").state == .clean)
        #expect(try await store.read("p.package", .members) == .members([member]))
    }

    @Test(
        "A package member renamed by another program to a name an ignore pattern matches, then removed: the package follows both (members are members whatever their names)"
    )
    func memberRenamedToAnIgnoredName() async throws {
        let harness = try await base.harness()
        try FileManager.default.createDirectory(atPath: harness.file("p.package"), withIntermediateDirectories: true)
        try Disk.write("c\n", to: harness.file("p.package/a.c"))
        await harness.store.sync()
        let store = harness.store
        try await store.open("p.package")
        #expect(rename(harness.file("p.package/a.c"), harness.file("p.package/a.c~")) == 0)
        await store.sync()
        #expect(try await store.read("p.package", .members) == .members(["a.c~"]))
        #expect(unlink(harness.file("p.package/a.c~")) == 0)
        await store.sync()
        #expect(try await store.read("p.package", .members) == .members([]))
        #expect(try await store.info("p.package").state == .clean)
    }

    @Test(
        "WhenRemoved=close: 3,000 renames back and forth while another program creates and removes files beside them: the document follows every one, its edit kept (the two halves of a rename are paired with other events between them)"
    )
    func renamesWithOtherEventsBetweenTheirHalves() async throws {
        let harness = try await base.harness { $0.whenRemoved = .close }
        let store = harness.store
        try await base.openEdited(harness, "a.txt", onDisk: "one\n", .setText("mine\n"))
        // Nothing but the renames: no conflict, no removal, no save failure.
        let seen = Mutex<[String]>([])
        await store.observe { event in
            if case .renamed = event { return }
            seen.withLock { $0.append("\(event)") }
        }
        // Another program at work in the same directory (names the default rules ignore).
        let stop = Mutex(false)
        let root = harness.root
        let noise = Thread {
            var i = 0
            while !stop.withLock({ $0 }) {
                let name = root + "/noise\(i % 16).tmp~"
                let fd = open(name, O_CREAT | O_WRONLY, 0o644)
                if fd >= 0 { close(fd) }
                unlink(name)
                i += 1
            }
        }
        noise.start()
        for i in 0..<3000 {
            let (from, to) = i % 2 == 0 ? ("a.txt", "b.txt") : ("b.txt", "a.txt")
            #expect(rename(harness.file(from), harness.file(to)) == 0)
        }
        stop.withLock { $0 = true }
        await store.sync()
        #expect(seen.withLock { $0 }.isEmpty, "\(seen.withLock { $0 })")
        #expect(try await store.read("a.txt") == .text("mine\n"))
        await #expect(throws: StoreError.self) { try await store.info("b.txt") }
        #expect(try harness.text(onDisk: "a.txt") == "one\n", "nothing saved meanwhile")
    }

    @Test(
        "WhenRemoved=close: a document closed while its save runs and another made at its path meanwhile: the old save's end does not count the new document's edits as saved"
    )
    func saveEndingForAClosedDocument() async throws {
        // One save at a time: the new document's first save starts once the old one's end is handled.
        let harness = try await base.harness {
            $0.whenRemoved = .close
            $0.maxConcurrentSaves = 1
        }
        let store = harness.store
        try await store.apply(.setText("old\n"), to: "a.txt", create: true)
        let file = harness.file("a.txt")
        // Right after the first save's rename: another program removes the file (the
        // document is closed), and a client makes a new document at the path.
        let made = AsyncStream<Void>.makeStream()
        await store.afterFirstRename(of: file) {
            #expect(unlink(file) == 0)
            await store.cookieBarrier()
            _ = try await store.apply(.setText("new\n"), to: "a.txt", create: true)
            made.continuation.finish()
        }
        // Answered at the close, while the save (and the client's edit) still runs.
        await #expect(throws: StoreError.self, "the document saved is closed") {
            try await store.save("a.txt", wait: true)
        }
        for await _ in made.stream {}
        await store.setAfterRename(nil)
        // Taken for the old save's, the new document's edit would count as saved: this
        // save would write nothing, and no file would be there.
        try await store.save("a.txt", wait: true)
        #expect(try harness.text(onDisk: "a.txt") == "new\n")
        #expect(try await store.info("a.txt").state == .clean)
    }

    @Test(
        "WhenRemoved=close, with the journal: the record of a save whose document was closed while it ran is released — the next start is given no record back"
    )
    func recordOfASaveForAClosedDocument() async throws {
        let harness = try await base.harness {
            $0.whenRemoved = .close
            $0.journalMode = .periodic
        }
        let store = harness.store
        try await store.openJournal()
        try await store.apply(.setText("old\n"), to: "a.txt", create: true)
        let file = harness.file("a.txt")
        // Right after the save's rename, another program removes the file: the document is closed.
        await store.afterFirstRename(of: file) {
            #expect(unlink(file) == 0)
            await store.cookieBarrier()
        }
        await #expect(throws: StoreError.self, "the document saved is closed") {
            try await store.save("a.txt", wait: true)
        }
        // The save's end, handled on the store after its directory's sync.
        let deadline = ContinuousClock.now + .seconds(30)
        while await store.savesInFlight > 0, ContinuousClock.now < deadline { await Task.yield() }
        await store.setAfterRename(nil)
        let directory = await store.configuration.journalDirectory
        #expect(await store.closeJournal().failure == nil)
        let journal = try Journal(directory: directory)
        var delivered: [String] = []
        let report = try journal.replay { delivered.append("LSN \($0.lsn) of owner \($0.owner)") }
        #expect(report.isClean, "\(report)")
        #expect(delivered.isEmpty, "records the next start would replay: \(delivered)")
        _ = journal.close()
    }

    @Test(
        "The conflict copy cannot be written (their version, a FIFO, cannot be read): a failed save with its backoff, `save --wait` answered save-failed, nothing replaced — not a save and a copy attempt without pause"
    )
    func conflictCopyFails() async throws {
        let harness = try await base.harness()
        let store = harness.store
        try await base.openEdited(harness, "a.txt", onDisk: "one\n", .setText("mine\n"))
        // Opened without blocking, it is no regular file: neither read again nor copied.
        try base.sh("mkfifo a.txt~ && mv a.txt~ a.txt", in: harness)
        await store.sync()
        let failure: StoreError? = await {
            do {
                try await store.save("a.txt", wait: true)
                return nil
            } catch let error as StoreError {
                return error
            } catch {
                return nil
            }
        }()
        guard case .saveFailed(let reported)? = failure else {
            Issue.record("expected save-failed, got \(String(describing: failure))")
            return
        }
        #expect(reported.retryAt > reported.failedAt)
        let info = try await store.info("a.txt")
        #expect(info.changeCount > info.savedChangeCount, "the edits are kept")
        try base.sh("test -p a.txt", in: harness)
        #expect(try await store.read("a.txt") == .text("mine\n"))
    }

    @Test(
        "Keep=disk, and another program leaves a JSON document unreadable while it has unsaved edits: one conflict copy holds the edits, the document is closed, and saves make no more copies"
    )
    func conflictWithAnUnreadableFile() async throws {
        let harness = try await base.harness()
        let store = harness.store
        try Disk.write("{\"v\": 0}\n", to: harness.file("a.json"))
        await store.sync()
        try await store.open("a.json")
        try await store.apply(.setJSON("{\"v\": 1}"), to: "a.json")
        try Disk.write("{\"v\": ", to: harness.file("a.json"))
        await store.sync()
        for _ in 0..<3 { _ = try? await store.save("a.json", wait: true) }
        await store.sync()
        let copies = try Disk.names(in: harness.root).filter { $0.hasPrefix("a (conflict ") }
        #expect(copies.count == 1, "\(copies)")
        if let copy = copies.first {
            #expect(try JSONValue(parsing: Array(try Disk.bytes(harness.file(copy)))) == ["v": 1])
        }
        #expect(try harness.text(onDisk: "a.json") == "{\"v\": ", "their version stays")
        await #expect(throws: StoreError.self, "closed") { try await store.info("a.json") }
    }

    @Test(
        "A save that finds the file being written, which then holds what it held before: the edits are saved and `save --wait` answered (the conflict's look finds nothing to keep)"
    )
    func saveAfterASettleThatFindsNothing() async throws {
        // Keep=memory: should the write outlast the wait on a slow machine, the conflict
        // keeps the edits under the name all the same.
        let harness = try await base.harness { $0.conflictKeep = .memory }
        try Disk.write("original\n", to: harness.file("notes.txt"))
        await harness.store.sync()
        try await harness.store.open("notes.txt")
        try await harness.store.apply(.setText("mine\n"), to: "notes.txt")
        #expect(truncate(harness.file("notes.txt"), 0) == 0)
        let store = harness.store
        let saving = Task { try await store.save("notes.txt", wait: true) }
        try await Task.sleep(for: .milliseconds(20))
        let fd = try FileDescriptor.open(harness.file("notes.txt"), .writeOnly)
        try fd.writeAll(Array("original\n".utf8))
        try fd.close()
        // Without the look scheduling the save, the document stayed unsaved and the save's
        // caller waited for good (3 of 3 runs): not awaited unless the edits are saved.
        await waitUntil("the edits are saved", timeout: .seconds(20)) {
            (try? await store.info("notes.txt").state) == .clean
        }
        if try await store.info("notes.txt").state == .clean { try await saving.value }
        #expect(try harness.text(onDisk: "notes.txt") == "mine\n")
    }

    @Test("Keep=memory: the edits keep the name and the other program's version is copied beside it")
    func keepMemory() async throws {
        let harness = try await base.harness { $0.conflictKeep = .memory }
        try Disk.write("original\n", to: harness.file("notes.txt"))
        try await harness.store.open("notes.txt")
        try await harness.store.apply(.setText("mine\n"), to: "notes.txt")
        try base.sh("printf 'theirs\\n' > notes.txt.new && mv notes.txt.new notes.txt", in: harness)
        await harness.store.sync()
        let event = await harness.next { if case .conflict = $0 { true } else { false } }
        guard case .conflict("notes.txt", let copy, .disk)? = event else {
            Issue.record("no conflict event: \(String(describing: event))")
            return
        }
        #expect(try harness.text(onDisk: copy) == "theirs\n")
        await harness.nextSave(of: "notes.txt")
        #expect(try harness.text(onDisk: "notes.txt") == "mine\n")
        #expect(await text(harness, "notes.txt") == "mine\n")
        await harness.store.sync()
        #expect(await harness.store.watchCounters.conflicts == 1, "the store's own save is no second conflict")
    }

    @Test(
        "WhenRemoved=close closes even a document with unsaved edits and says so; OpenNewFiles=no leaves new files alone"
    )
    func closeAndIgnoreNew() async throws {
        let harness = try await base.harness {
            $0.whenRemoved = .close
            $0.openNewFiles = false
        }
        try Disk.write("dirty\n", to: harness.file("dirty.txt"))
        try await harness.store.open("dirty.txt")
        try await harness.store.apply(.setText("unsaved\n"), to: "dirty.txt")
        try base.sh("rm dirty.txt && printf 'new\\n' > new.txt", in: harness)
        await harness.store.sync()
        await #expect(throws: StoreError.notFound("dirty.txt")) { try await harness.store.info("dirty.txt") }
        await #expect(throws: StoreError.notFound("new.txt")) { try await harness.store.info("new.txt") }
        #expect(!FileManager.default.fileExists(atPath: harness.file("dirty.txt")))
        #expect(harness.lines.all.contains { $0.message.contains("1 unsaved edit(s) discarded") })
    }

    @Test("WhenRemoved=recreate writes back even a document without unsaved edits")
    func recreateAlways() async throws {
        let harness = try await base.harness { $0.whenRemoved = .recreate }
        try Disk.write("keep me\n", to: harness.file("clean.txt"))
        try await harness.store.open("clean.txt")
        try base.sh("rm clean.txt", in: harness)
        await harness.store.sync()
        await harness.nextSave(of: "clean.txt")
        #expect(try harness.text(onDisk: "clean.txt") == "keep me\n")
    }

    @Test(
        "Watch limit: with fs.inotify.max_user_watches lowered, the limit is reported once and polling notices external edits",
        .enabled(if: Machine.isRoot, "writing /proc/sys/fs/inotify needs root"))
    func watchLimit() async throws {
        let setting = "/proc/sys/fs/inotify/max_user_watches"
        let original = try String(contentsOfFile: setting, encoding: .utf8).trimmingCharacters(
            in: .whitespacesAndNewlines)
        let directory = TemporaryDirectory("limit")
        let root = directory.sub("root")
        for i in 0..<30 {
            try FileManager.default.createDirectory(atPath: root + "/d\(i)", withIntermediateDirectories: true)
            try Disk.write("v0 \(i)\n", to: root + "/d\(i)/doc.txt")
        }
        // Room for the root and three more directories beyond what is in use now.
        try Disk.write("\(Self.watchesInUse() + 4)\n", to: setting)
        let harness: StoreHarness
        do {
            harness = try await base.harness {
                $0.root = root
                $0.pollInterval = .milliseconds(200)
            }
        } catch {
            try Disk.write(original + "\n", to: setting)
            throw error
        }
        defer { try? Disk.write(original + "\n", to: setting) }
        await harness.store.openAll()
        let polled = await harness.store.polledDirectories
        #expect(polled.count >= 20, "most directories are polled: \(polled)")
        #expect(await harness.store.watchSummary?.polledDirectories == polled.count, "status reports them")
        guard let first = polled.first else { return }
        // The periodic poll notices an edit with nobody asking.
        try base.sh("sed -i 's/v0/v1/' '\(first)/doc.txt'", in: harness)
        await harness.next { $0 == .changedOnDisk(document: first + "/doc.txt") }
        #expect(await text(harness, first + "/doc.txt") == "v1 \(first.dropFirst())\n")
        // Every directory, watched or polled, after the sync barrier; a new directory too.
        try base.sh(
            "for d in d*; do sed -i 's/v[01]/v2/' $d/doc.txt; done && mkdir new && printf 'n\\n' > new/n.txt",
            in: harness)
        await harness.store.sync()
        for i in 0..<30 { #expect(await text(harness, "d\(i)/doc.txt") == "v2 \(i)\n") }
        #expect(await text(harness, "new/n.txt") == "n\n")
        #expect(harness.lines.count(messageID: MessageID.watchLimit) == 1, "reported once")
        #expect(
            harness.lines.all.first { $0.metadata["message_id"] == MessageID.watchLimit }?.message.contains(
                "fs.inotify.max_user_watches") == true)
    }

    @Test("Turning the watcher off and on again by reconfiguration: changes made meanwhile are found")
    func reconfigureWatching() async throws {
        let harness = try await base.harness()
        try Disk.write("v0\n", to: harness.file("doc.txt"))
        try await harness.store.open("doc.txt")
        var configuration = await harness.store.configuration
        configuration.watchEnabled = false
        await harness.store.reconfigure(configuration)
        try base.sh("printf 'v1\n' > doc.txt && printf 'new\n' > new.txt", in: harness)
        await harness.store.sync()
        #expect(await text(harness, "doc.txt") == "v0\n", "nothing watches")
        configuration.watchEnabled = true
        configuration.pollInterval = .milliseconds(500)
        await harness.store.reconfigure(configuration)
        #expect(await text(harness, "doc.txt") == "v1\n")
        #expect(await text(harness, "new.txt") == "new\n")
        try base.sh("printf 'v2\n' > doc.txt", in: harness)
        await harness.store.sync()
        #expect(await text(harness, "doc.txt") == "v2\n", "watched again")
    }

    /// inotify watches held by all processes (all run as root here, so all count against root's limit).
    static func watchesInUse() -> Int {
        var count = 0
        let proc = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for pid in proc where Int(pid) != nil {
            let fdinfo = "/proc/\(pid)/fdinfo"
            for fd in (try? FileManager.default.contentsOfDirectory(atPath: fdinfo)) ?? [] {
                guard let text = try? String(contentsOfFile: fdinfo + "/" + fd, encoding: .utf8) else { continue }
                count += text.split(separator: "\n").filter { $0.hasPrefix("inotify wd:") }.count
            }
        }
        return count
    }

    @Test("The root moved away: reported, documents stay in memory, and the root is watched again once it is back")
    func rootMoved() async throws {
        let harness = try await base.harness { $0.pollInterval = .milliseconds(200) }
        try Disk.write("a\n", to: harness.file("a.txt"))
        try await harness.store.open("a.txt")
        try await harness.store.apply(.setText("unsaved b\n"), to: "b.txt", create: true)
        try FileManager.default.moveItem(atPath: harness.root, toPath: harness.root + ".gone")
        await waitUntil("the store reports the root gone") {
            harness.lines.all.contains { $0.message.contains("is gone (removed or moved away)") }
        }
        #expect(await text(harness, "b.txt") == "unsaved b\n", "documents stay in memory")
        // A save does not make the root again (it could be a directory on the wrong file
        // system): it fails, naming the root, until the operator brings it back.
        await #expect(throws: StoreError.self) { try await harness.store.save("b.txt", wait: true) }
        #expect(!FileManager.default.fileExists(atPath: harness.root))
        // Nor into the directory moved away.
        #expect(!FileManager.default.fileExists(atPath: harness.root + ".gone/b.txt"))
        try FileManager.default.createDirectory(atPath: harness.root, withIntermediateDirectories: false)
        await waitUntil("the retry saves b.txt into the root made again") {
            (try? harness.text(onDisk: "b.txt")) == "unsaved b\n"
        }
        try Disk.write("c\n", to: harness.file("c.txt"))
        await harness.store.sync()
        #expect(await text(harness, "c.txt") == "c\n", "the new root is watched")
        await #expect(throws: StoreError.notFound("a.txt")) { try await harness.store.info("a.txt") }
        try base.sh("printf 'c2\\n' > c.txt", in: harness)
        await harness.store.sync()
        #expect(await text(harness, "c.txt") == "c2\n")
    }

    @Test("A reload that turns OpenNewFiles= on opens the files that appeared while it was off, as a start would")
    func openNewFilesTurnedOn() async throws {
        let harness = try await base.harness { $0.openNewFiles = false }
        try Disk.write("a\n", to: harness.file("a.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        try Disk.write("b\n", to: harness.file("b.txt"))
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["a.txt"])
        var configuration = await harness.store.configuration
        configuration.openNewFiles = true
        await harness.store.reconfigure(configuration)
        #expect(await harness.store.list().map(\.path) == ["a.txt", "b.txt"])
        await harness.store.stopWatching()
    }

    @Test(
        "A reload that restarts the watcher while the root is gone: the documents stay in memory, unsaved edits included (WhenRemoved=close), and are saved into it once it is back"
    )
    func reloadWhileTheRootIsGone() async throws {
        let harness = try await base.harness {
            $0.pollInterval = .milliseconds(200)
            $0.whenRemoved = .close
        }
        try Disk.write("a\n", to: harness.file("a.txt"))
        try Disk.write("c\n", to: harness.file("c.txt"))
        try await harness.store.open("a.txt")
        try await harness.store.open("c.txt")
        try await harness.store.apply(.append("unsaved\n"), to: "a.txt")
        try FileManager.default.moveItem(atPath: harness.root, toPath: harness.root + ".gone")
        await waitUntil("the store reports the root gone") {
            harness.lines.all.contains { $0.message.contains("is gone (removed or moved away)") }
        }
        var configuration = await harness.store.configuration
        configuration.pollInterval = .milliseconds(300)
        await harness.store.reconfigure(configuration)
        #expect(await harness.store.list().map(\.path) == ["a.txt", "c.txt"], "nothing closed")
        #expect(await text(harness, "a.txt") == "a\nunsaved\n")
        try FileManager.default.moveItem(atPath: harness.root + ".gone", toPath: harness.root)
        await waitUntil("the store sees the root back") { await harness.store.status().rootGoneSince == nil }
        try await harness.store.save("a.txt", wait: true)
        #expect(try harness.text(onDisk: "a.txt") == "a\nunsaved\n")
    }
}

extension DocumentStore {
    /// Where a test stands in for another program in the moment after a save's rename (see ``DurableWriter/afterRename``).
    func setAfterRename(_ hook: (@Sendable (String) -> Void)?) {
        writer.afterRename = hook
    }

    /// Runs `body` (another program, and clients) right after the first rename of
    /// `file` by a save — on the save's thread, before its directory's sync — and has the
    /// watcher's reports of what it did handled: the save's end comes after them. Once
    /// only: a later save (another document's at the path, say) runs as usual. The save
    /// must run on a save thread (a document not saved yet, or a package), not on the
    /// store's own, which `body` needs.
    func afterFirstRename(of file: String, _ body: @escaping @Sendable () async throws -> Void) {
        let first = Mutex(true)
        writer.afterRename = { [self] path in
            // By bytes: a path in another Unicode normalization is another file.
            guard path.utf8.elementsEqual(file.utf8),
                first.withLock({ was in
                    defer { was = false }
                    return was
                })
            else { return }
            let done = DispatchSemaphore(value: 0)
            Task {
                do { try await body() } catch { Issue.record(error) }
                await cookieBarrier()
                done.signal()
            }
            done.wait()
        }
    }
}
