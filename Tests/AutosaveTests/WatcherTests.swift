import Documents
import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// Other programs edit the files the store holds; each case is checked through the
/// store after the sync barrier.
@Suite("Changes by other programs", .serialized, .timeLimit(.minutes(2)))
struct WatcherTests {
    func harness(
        quiet: Duration = .seconds(3600), configure: (inout Configuration) -> Void = { _ in }
    ) async throws -> StoreHarness {
        let harness = await StoreHarness(quiet: quiet, maxDelay: .seconds(3600), configure: configure)
        try await harness.store.startWatching()
        return harness
    }

    /// Opens `path`, first written with `text` by another program, and makes `edit` to it
    /// (left unsaved: the quiet period is long).
    func openEdited(_ harness: StoreHarness, _ path: String, onDisk text: String, _ edit: DocumentEdit) async throws {
        try Disk.write(text, to: harness.file(path))
        await harness.store.sync()
        try await harness.store.open(path)
        try await harness.store.apply(edit, to: path)
    }

    func sh(_ script: String, in harness: StoreHarness) throws {
        let result = try Machine.run("/bin/sh", ["-c", "cd '\(harness.root)' && " + script])
        #expect(result.status == 0, "\(script): \(result.stderr)")
    }

    func text(_ harness: StoreHarness, _ path: String) async throws -> String? {
        if case .text(let text)? = try? await harness.store.read(path) { return text }
        return nil
    }

    @Test("sed -i, a rename-over save, cp over, an in-place >> append: a clean document is read again")
    func cleanDocumentsReload() async throws {
        let harness = try await harness()
        for name in ["sed.txt", "vim.txt", "cp.txt", "append.txt"] {
            try Disk.write("original\n", to: harness.file(name))
            try await harness.store.open(name)
        }
        try sh("sed -i 's/original/by sed/' sed.txt", in: harness)
        try sh("printf 'by vim\\n' > .vim.txt.swp && mv .vim.txt.swp vim.txt", in: harness)
        try sh(
            "printf 'by cp\\n' > /tmp/autosaved-cp-source-$$ && cp /tmp/autosaved-cp-source-$$ cp.txt && rm /tmp/autosaved-cp-source-$$",
            in: harness)
        try sh("printf 'appended\\n' >> append.txt", in: harness)
        await harness.store.sync()
        #expect(try await text(harness, "sed.txt") == "by sed\n")
        #expect(try await text(harness, "vim.txt") == "by vim\n")
        #expect(try await text(harness, "cp.txt") == "by cp\n")
        #expect(try await text(harness, "append.txt") == "original\nappended\n")
        for name in ["sed.txt", "vim.txt", "cp.txt", "append.txt"] {
            #expect(try await harness.store.info(name).state == .clean)
        }
    }

    @Test(
        "A dirty document edited by another program: both versions exist on disk, byte for byte, and the conflict is reported"
    )
    func conflict() async throws {
        let harness = try await harness()
        try Disk.write("original\n", to: harness.file("notes.txt"))
        try await harness.store.open("notes.txt")
        try await harness.store.apply(.setText("mine, unsaved\n"), to: "notes.txt")
        try sh("printf 'theirs\\n' > notes.txt.tmp && mv notes.txt.tmp notes.txt", in: harness)
        await harness.store.sync()
        let event = await harness.next { if case .conflict = $0 { true } else { false } }
        guard case .conflict("notes.txt", let copy, .memory)? = event else {
            Issue.record("no conflict event")
            return
        }
        #expect(copy.hasPrefix("notes (conflict "))
        #expect(try harness.text(onDisk: "notes.txt") == "theirs\n", "the other program's version stays")
        #expect(try harness.text(onDisk: copy) == "mine, unsaved\n", "the unsaved edits are beside it")
        #expect(try await text(harness, "notes.txt") == "theirs\n")
        #expect(await harness.store.watchCounters.conflicts == 1)
    }

    @Test(
        "A root that is a symbolic link (DynamicUser= makes /var/lib/autosaved one) is watched: a file another program makes there is opened, a change to a document read again"
    )
    func rootThroughSymbolicLink() async throws {
        let directory = TemporaryDirectory("linked-root")
        let target = directory.sub("private/root")
        try FileManager.default.createDirectory(atPath: target + "/sub", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: directory.sub("root"), withDestinationPath: target)
        try Disk.write("original\n", to: target + "/a.txt")
        let harness = await StoreHarness(root: directory.sub("root"), quiet: .seconds(3600), maxDelay: .seconds(3600))
        await harness.store.openAll()
        try await harness.store.startWatching()
        #expect(await harness.store.watchSummary?.watchedDirectories == 2, "the root and sub")
        #expect(await harness.store.watchSummary?.polledDirectories == 0)

        try Disk.write("theirs\n", to: target + "/new.txt")
        try Disk.write("changed\n", to: target + "/a.txt.tmp")
        try FileManager.default.moveItem(atPath: target + "/a.txt.tmp", toPath: target + "/a.txt.moved")
        _ = rename(target + "/a.txt.moved", target + "/a.txt")
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["a.txt", "new.txt"], "new.txt opened")
        #expect(try await text(harness, "new.txt") == "theirs\n")
        #expect(try await text(harness, "a.txt") == "changed\n", "read again")
        await harness.store.stopWatching()
        withExtendedLifetime(directory) {}
    }

    @Test(
        "Files made, changed or removed after the scan that opened the documents and before the watches were there are caught up with as the watch starts"
    )
    func caughtUpAtStart() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        let store = harness.store
        try Disk.write("one\n", to: harness.file("a.txt"))
        try Disk.write("two\n", to: harness.file("b.txt"))
        try Disk.write("three\n", to: harness.file("c.txt"))
        try Disk.write("four\n", to: harness.file("d.txt"))
        await store.openAll()
        #expect(await store.status().documents == 4)

        // Between the scan and the watch (at start-up: while the journal is replayed).
        try sh(
            "printf 'new\\n' > new.txt && printf 'changed\\n' > a.tmp && mv a.tmp a.txt && printf 'more\\n' >> b.txt && rm c.txt",
            in: harness)
        try await store.startWatching()
        await store.sync()
        #expect(
            await store.list().map(\.path) == ["a.txt", "b.txt", "d.txt", "new.txt"], "new.txt opened, c.txt closed")
        #expect(try await text(harness, "new.txt") == "new\n")
        #expect(try await text(harness, "a.txt") == "changed\n", "read again")
        #expect(try await text(harness, "b.txt") == "two\nmore\n", "read again")
        await #expect(throws: StoreError.notFound("c.txt"), "a clean document whose file is gone is closed") {
            try await store.info("c.txt")
        }
        #expect(try await text(harness, "d.txt") == "four\n")
        #expect(await store.watchCounters.reloads == 2)
        #expect(await store.status().documents == 4, "a, b, d and new")
        await store.stopWatching()
    }

    @Test(
        "A root gone before the watch starts is reported gone, not taken for every file removed: the documents stay, and it is watched once it is back"
    )
    func rootGoneBeforeTheWatch() async throws {
        let harness = await StoreHarness(
            quiet: .seconds(3600), maxDelay: .seconds(3600), configure: { $0.pollInterval = .milliseconds(100) })
        let store = harness.store
        try Disk.write("one\n", to: harness.file("a.txt"))
        try Disk.write("two\n", to: harness.file("b.txt"))
        await store.openAll()
        try await store.apply(.append("unsaved\n"), to: "b.txt")
        try FileManager.default.removeItem(atPath: harness.root)
        try await store.startWatching()
        await store.sync()
        #expect(await store.list().map(\.path) == ["a.txt", "b.txt"], "nothing closed")
        #expect(await store.status().rootGoneSince != nil)

        try FileManager.default.createDirectory(atPath: harness.root, withIntermediateDirectories: false)
        try Disk.write("three\n", to: harness.file("c.txt"))
        let deadline = ContinuousClock.now + .seconds(10)
        while await store.status().rootGoneSince != nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        await store.sync()
        #expect(await store.status().rootGoneSince == nil, "looked for, and found back")
        #expect(await store.watchSummary?.watchedDirectories == 1)
        #expect(await store.list().map(\.path).contains("c.txt"), "the root's files opened again")
        await store.stopWatching()
    }

    @Test(
        "A watched root removed with its directories and made again: watched afresh, with nothing kept of the watches it had"
    )
    func rootRemovedAndBack() async throws {
        let harness = await StoreHarness(
            quiet: .seconds(3600), maxDelay: .seconds(3600), configure: { $0.pollInterval = .milliseconds(100) })
        let store = harness.store
        try FileManager.default.createDirectory(atPath: harness.file("sub/deeper"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("sub/deeper/a.txt"))
        await store.openAll()
        try await store.startWatching()
        await store.sync()
        #expect(await store.watchSummary?.watchedDirectories == 3)

        try FileManager.default.removeItem(atPath: harness.root)
        var deadline = ContinuousClock.now + .seconds(10)
        while await store.status().rootGoneSince == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(await store.status().rootGoneSince != nil)
        try FileManager.default.createDirectory(atPath: harness.root, withIntermediateDirectories: false)
        try Disk.write("two\n", to: harness.file("b.txt"))
        deadline = ContinuousClock.now + .seconds(10)
        while await store.status().rootGoneSince != nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        await store.sync()
        #expect(await store.status().rootGoneSince == nil, "found back")
        #expect(await store.watchSummary?.watchedDirectories == 1)
        // The removal's read was cut at the root's own deletion, with the `IN_IGNORED` of
        // the watches it gave back: none of them may be waited for after it is back.
        #expect(await store.watcher?.givenBackCount == 0)
        #expect(try await text(harness, "b.txt") == "two\n")
        await store.stopWatching()
    }

    @Test(
        "A burst of saves (3,000 documents at once) leaves nothing behind once their renames are reported, those whose two halves were read apart included"
    )
    func burstOfSavesLeavesNothing() async throws {
        let harness = try await harness()
        let store = harness.store
        for n in 0..<3000 { try await store.apply(.setText("document \(n)\n"), to: "burst/d\(n).txt", create: true) }
        try await store.saveAll(wait: true)
        await store.sync()
        let renames = await store.ownRenames.count
        #expect(renames == 0, "every save's rename was reported and taken for the store's own")
        #expect(await store.watchCounters.reloads == 0, "the saves were taken for the store's own")
        #expect(try harness.text(onDisk: "burst/d2999.txt") == "document 2999\n")
        await store.stopWatching()
    }

    @Test("rm of a clean document closes it; rm of a dirty one writes it again")
    func removed() async throws {
        let harness = try await harness()
        try Disk.write("clean\n", to: harness.file("clean.txt"))
        try Disk.write("dirty\n", to: harness.file("dirty.txt"))
        try await harness.store.open("clean.txt")
        try await harness.store.open("dirty.txt")
        try await harness.store.apply(.setText("unsaved\n"), to: "dirty.txt")
        try sh("rm clean.txt dirty.txt", in: harness)
        await harness.store.sync()
        await #expect(throws: StoreError.notFound("clean.txt")) { try await harness.store.info("clean.txt") }
        await harness.nextSave(of: "dirty.txt")
        #expect(try harness.text(onDisk: "dirty.txt") == "unsaved\n")
    }

    @Test(
        "New files, files moved into the root, and new package members are noticed; a file or a directory moved out is closed, with nothing rescanned"
    )
    func newFiles() async throws {
        let harness = try await harness()
        let outside = harness.directory.sub("outside.txt")
        try Disk.write("moved in\n", to: outside)
        try FileManager.default.createDirectory(atPath: harness.file("book.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("book.package/1.txt"))
        try await harness.store.open("book.package")
        try sh(
            "mkdir -p sub && printf 'new\\n' > sub/new.txt && mv '\(outside)' moved.txt && printf 'two\\n' > book.package/2.txt",
            in: harness)
        await harness.store.sync()
        #expect(try await text(harness, "sub/new.txt") == "new\n")
        #expect(try await text(harness, "moved.txt") == "moved in\n")
        #expect(try await harness.store.read("book.package", .members) == .members(["1.txt", "2.txt"]))
        try sh("mv moved.txt '\(harness.directory.sub("gone.txt"))'", in: harness)
        await harness.store.sync()
        await #expect(throws: StoreError.self) { try await harness.store.info("moved.txt") }
        // A watched directory moved out: its documents are closed, and the event its own
        // watch reports about the move (IN_MOVE_SELF, read after the watch was given back)
        // is no lost event: nothing is rescanned, so a document closed meanwhile stays closed.
        try await harness.store.apply(.setText("closed\n"), to: "kept-closed.txt", create: true)
        try await harness.store.close("kept-closed.txt")
        try sh("mv sub '\(harness.directory.sub("gone-sub"))'", in: harness)
        await harness.store.sync()
        await #expect(throws: StoreError.self) { try await harness.store.info("sub/new.txt") }
        #expect(
            await harness.store.watchCounters.overflows == 0,
            "an event of the moved directory's own watch taken for a lost one")
        #expect(!(await harness.store.isOpen("kept-closed.txt")), "a rescan opened a document closed by request")
    }

    /// The change's event is handled after the rename, when the old name no longer
    /// exists; the rename must not carry the document's old contents to the new name.
    /// Found by the soak (scripts/soak): the daemon kept stale text for a renamed file.
    @Test(
        "A file rewritten (in place or by a rename over it) and at once renamed: the document under the new name holds the new contents"
    )
    func rewrittenThenRenamed() async throws {
        let harness = try await harness()
        let count = 20
        for i in 0..<count {
            try Disk.write("old \(i)\n", to: harness.file("r\(i).txt"))
            try await harness.store.open("r\(i).txt")
        }
        for i in 0..<count {
            let path = harness.file("r\(i).txt")
            if i.isMultiple(of: 2) {
                try Disk.write("new \(i)\n", to: path)
            } else {
                try Disk.write("new \(i)\n", to: harness.file(".r\(i).txt.swp"))
                #expect(rename(harness.file(".r\(i).txt.swp"), path) == 0)
            }
            #expect(rename(path, harness.file("moved\(i).txt")) == 0)
        }
        await harness.store.sync()
        for i in 0..<count {
            #expect(try await text(harness, "moved\(i).txt") == "new \(i)\n", "moved\(i).txt")
            #expect(try await harness.store.info("moved\(i).txt").state == .clean)
        }
    }

    @Test("1,000 saves by the store itself cause no reload and no conflict")
    func ownSaves() async throws {
        let harness = try await harness()
        for i in 0..<1000 {
            try await harness.store.apply(.setText("version \(i)\n"), to: "own/doc\(i % 10).txt", create: true)
            try await harness.store.save("own/doc\(i % 10).txt", wait: true)
        }
        let package = "own/book.package"
        try await harness.store.create(package)
        for i in 0..<50 {
            try await harness.store.apply(.putMember("m\(i % 5).txt", Data("v\(i)".utf8)), to: package)
            try await harness.store.save(package, wait: true)
        }
        await harness.store.sync()
        let counters = await harness.store.watchCounters
        #expect(counters.reloads == 0)
        #expect(counters.conflicts == 0)
        #expect(try await harness.store.info("own/doc9.txt").state == .clean)
    }

    @Test(
        "Documents closed right after their saves stay closed: the saves' events, still queued at the close, open nothing; a file written after the close is opened"
    )
    func closedStayClosed() async throws {
        let harness = try await harness()
        var closed: [String] = []
        for i in 0..<40 {
            let text = "closed/t\(i).txt"
            try await harness.store.apply(.setText("text \(i)\n"), to: text, create: true)
            try await harness.store.close(text)
            let package = "closed/p\(i).package"
            try await harness.store.create(package)
            try await harness.store.apply(.putMember("m.txt", Data("member \(i)".utf8)), to: package)
            try await harness.store.close(package)
            closed += [text, package]
        }
        await harness.store.sync()
        var reopened: [String] = []
        for path in closed where await harness.store.isOpen(path) { reopened.append(path) }
        #expect(reopened.isEmpty, "closed and opened again by their own saves' events: \(reopened)")
        #expect(try Disk.bytes(harness.file("closed/t7.txt")) == Data("text 7\n".utf8), "each close saved first")
        // Another program's write after the close is a new file to open, as before.
        try sh("printf 'by another program\\n' > closed/t3.txt", in: harness)
        try sh("printf 'member by another\\n' > closed/p5.package/m.txt", in: harness)
        await harness.store.sync()
        #expect(try await text(harness, "closed/t3.txt") == "by another program\n")
        #expect(await harness.store.isOpen("closed/p5.package"))
        #expect(!(await harness.store.isOpen("closed/t4.txt")))
    }

    @Test(
        "Events queued while the store's loop is busy, many reads' worth and nothing after them, are all read: every new file is opened"
    )
    func backlogWithoutFurtherEvents() async throws {
        let harness = try await harness()
        let count = 3000
        let name = String(repeating: "n", count: 100)
        // Made on the store's thread: the loop polls nothing meanwhile, so the watcher is
        // kicked once for the whole burst — 6,000 events of 128 bytes, a dozen reads.
        let paths = (0..<count).map { harness.file("\(name)-\($0).txt") }
        try await harness.store.whileBusy {
            for (index, path) in paths.enumerated() {
                let fd = try FileDescriptor.open(path, .writeOnly, options: [.create, .exclusiveCreate])
                try fd.writeAll(Array("\(index)\n".utf8))
                try fd.close()
            }
        }
        // No sync barrier: its cookie file would be a new event, and a new kick.
        let deadline = ContinuousClock.now + .seconds(30)
        var opened = 0
        while ContinuousClock.now < deadline {
            opened = await harness.store.list().count
            if opened == count { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(opened == count, "every file of the burst opened")
        #expect(try await text(harness, "\(name)-\(count - 1).txt") == "\(count - 1)\n")
    }

    @Test(
        "Overflow: with fs.inotify.max_queued_events lowered, a burst of changes ends with every document right",
        .enabled(if: Machine.isRoot, "writing /proc/sys/fs/inotify needs root"))
    func overflow() async throws {
        // The watcher gets one slot, so a burst from one fast process cannot fit.
        let harness = try await StoreHarness.withOneReportQueue { try await self.harness() }
        for i in 0..<50 {
            try Disk.write("v0\n", to: harness.file("d\(i).txt"))
        }
        await harness.store.sync()
        for i in 0..<50 { try await harness.store.open("d\(i).txt") }
        // One process, as fast as it can: far more events than the queue holds.
        let burst = """
            import os
            for r in range(10):
                for i in range(50):
                    with open(f"d{i}.txt.new", "w") as f: f.write(f"v1 {i}\\n")
                    os.rename(f"d{i}.txt.new", f"d{i}.txt")
            with open("new.txt", "w") as f: f.write("brand new\\n")
            """
        try Disk.write(burst, to: harness.directory.sub("burst.py"))
        try sh("python3 '\(harness.directory.sub("burst.py"))'", in: harness)
        await harness.store.sync()
        #expect(await harness.store.watchCounters.overflows >= 1, "the burst overflowed the one-event queue")
        for i in 0..<50 { #expect(try await text(harness, "d\(i).txt") == "v1 \(i)\n") }
        #expect(try await text(harness, "new.txt") == "brand new\n")
    }
}

extension DocumentStore {
    /// Runs `body` on the store's thread: the loop does nothing else meanwhile.
    fileprivate func whileBusy(_ body: @Sendable () throws -> Void) rethrows { try body() }
}
