import Autosave
import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// A GlusterFS volume on a local brick, mounted twice: the second mount stands for
/// another host sharing the storage (inotify on one mount never sees changes made
/// through the other, as between two hosts). Torn down in reverse order on deinit.
final class GlusterVolume {
    let directory = TemporaryDirectory("gluster")
    let name = "autosaved" + CurrentProcess.randomAlphanumerics(8).lowercased()
    /// The daemon's mount, and the other host's.
    var here: String { directory.sub("here") }
    var otherHost: String { directory.sub("other") }
    private var glusterd: Process?
    private var mounted: [String] = []
    private var created = false

    init() throws {
        for sub in ["brick", "here", "other"] {
            try FileManager.default.createDirectory(atPath: directory.sub(sub), withIntermediateDirectories: true)
        }
        try FileManager.default.createDirectory(atPath: "/var/log/glusterfs", withIntermediateDirectories: true)
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/sbin/glusterd")
        daemon.arguments = ["-N", "--log-file=\(directory.sub("glusterd.log"))"]
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        glusterd = daemon
        // glusterd answers once it listens; each try is a round trip to it.
        var up = false
        for _ in 0..<200 where !up {
            up = (try? Machine.run("/usr/sbin/gluster", ["--mode=script", "volume", "list"]))?.status == 0
            if !up { usleep(50_000) }
        }
        guard up else { throw Failure("glusterd did not answer") }
        let host = ProcessInfo.processInfo.hostName
        try gluster(["volume", "create", name, "\(host):\(directory.sub("brick"))", "force"])
        created = true
        // The client's own caches off (metadata, reads): each mount shows the other's changes at
        // once, as a volume with cache invalidation does; without, a client serves a stat up
        // to a second old, and neither the poll nor a save's look at the file could see more.
        for option in [
            "performance.stat-prefetch", "performance.quick-read", "performance.io-cache", "performance.read-ahead",
            "performance.open-behind", "performance.readdir-ahead",
        ] {
            try gluster(["volume", "set", name, option, "off"])
        }
        try gluster(["volume", "start", name])
        // No attribute or entry caching: what one mount sees of the other's changes is current.
        for mount in [here, otherHost] {
            let status = try detached(
                "/bin/mount",
                ["-t", "glusterfs", "-o", "attribute-timeout=0,entry-timeout=0", "\(host):/\(name)", mount])
            guard status == 0 else { throw Failure("mount glusterfs failed with status \(status)") }
            mounted.append(mount)
        }
    }

    /// Runs a command whose children outlive it (mount.glusterfs leaves its client process
    /// running, holding whatever descriptors it inherited): spawned and waited for by its
    /// process ID alone, its output to a log file, so that no pipe or process monitor waits
    /// on the client.
    private func detached(_ program: String, _ arguments: [String]) throws -> Int32 {
        let command = ([program] + arguments).map { "'\($0)'" }.joined(separator: " ")
        let argv = ["/bin/sh", "-c", "exec \(command) >>'\(directory.sub("mount.log"))' 2>&1 </dev/null"]
        var pointers = argv.map { strdup($0) } + [nil]
        defer { for pointer in pointers { free(pointer) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, "/bin/sh", nil, nil, &pointers, environ) == 0 else {
            throw Failure("cannot start \(program)")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status >> 8) & 0xFF
    }

    private func gluster(_ arguments: [String]) throws {
        let result = try Machine.run("/usr/sbin/gluster", ["--mode=script"] + arguments)
        guard result.status == 0 else { throw Failure("gluster \(arguments.joined(separator: " ")): \(result.stderr)") }
    }

    deinit {
        for mount in mounted.reversed() { _ = try? Machine.run("umount", ["-l", mount]) }
        if created {
            try? gluster(["volume", "stop", name, "force"])
            try? gluster(["volume", "delete", name])
        }
        if let glusterd {
            glusterd.terminate()
            glusterd.waitUntilExit()
        }
    }
}

@Suite(
    "A root on a shared file system (GlusterFS, mounted twice)", .serialized, .timeLimit(.minutes(3)),
    .enabled(
        if: Machine.isRoot && FileManager.default.isExecutableFile(atPath: "/usr/sbin/glusterd"),
        "needs root and glusterfs-server (scripts/bootstrap installs it)"))
final class SharedFileSystemTests {
    let volume: GlusterVolume
    let harness: StoreHarness

    init() async throws {
        volume = try GlusterVolume()
        let root = volume.here + "/root"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        harness = await StoreHarness(root: root, quiet: .seconds(3600), maxDelay: .seconds(3600))
    }

    func other(_ path: String) -> String { volume.otherHost + "/root/" + path }

    /// Another host replaces `path` the way editors save: a new file renamed over it.
    func otherHostRewrites(_ path: String, _ text: String) throws {
        try Disk.write(text, to: other(".tmp-" + path))
        try FileManager.default.moveItem(atPath: other(".tmp-" + path), toPath: other(path) + ".moved")
        #expect(rename(other(path) + ".moved", other(path)) == 0)
    }

    @Test(
        "Mode=auto polls it; another host's rename-over is read again when clean and kept as a conflict when dirty, never overwritten"
    )
    func otherHostsChanges() async throws {
        try Disk.write("one\n", to: harness.file("clean.txt"))
        try Disk.write("one\n", to: harness.file("dirty.txt"))
        try Disk.write("one\n", to: harness.file("saved.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        let summary = try #require(await harness.store.watchSummary)
        #expect(summary.mode == .auto && summary.watchedDirectories == 0 && summary.polledByChoice == 1)

        try otherHostRewrites("clean.txt", "theirs\n")
        try await harness.store.apply(.setText("mine\n"), to: "dirty.txt")
        try otherHostRewrites("dirty.txt", "theirs\n")
        await harness.store.sync()
        #expect(try await harness.store.read("clean.txt") == .text("theirs\n"), "read again")
        await harness.next { if case .conflict("dirty.txt", _, .memory) = $0 { return true } else { return false } }
        #expect(try String(contentsOfFile: other("dirty.txt"), encoding: .utf8) == "theirs\n")

        // A change no poll has seen yet: the save itself finds it.
        try await harness.store.apply(.setText("mine\n"), to: "saved.txt")
        try otherHostRewrites("saved.txt", "theirs\n")
        await #expect(throws: StoreError.self) { try await harness.store.save("saved.txt", wait: true) }
        #expect(try String(contentsOfFile: other("saved.txt"), encoding: .utf8) == "theirs\n")
        let names = try Disk.names(in: volume.otherHost + "/root")
        #expect(names.filter { $0.hasPrefix("dirty (conflict ") }.count == 1, "\(names)")
        #expect(names.filter { $0.hasPrefix("saved (conflict ") }.count == 1, "\(names)")
        await harness.store.stopWatching()
    }

    @Test("A new package is saved there (the file system refuses renameat2's flags), and so are its later edits")
    func newPackage() async throws {
        try await harness.store.create("p.package")
        try await harness.store.apply(.putMember("a.txt", Data("one\n".utf8)), to: "p.package")
        try await harness.store.save("p.package", wait: true)
        #expect(try String(contentsOfFile: other("p.package/a.txt"), encoding: .utf8) == "one\n")
        try await harness.store.apply(.putMember("b.txt", Data("two\n".utf8)), to: "p.package")
        try await harness.store.save("p.package", wait: true)
        #expect(try Disk.names(in: other("p.package")) == ["a.txt", "b.txt"])
    }
}

@Suite("[Watch] Mode=", .serialized, .timeLimit(.minutes(1)))
struct WatchModeTests {
    @Test("Mode=poll watches nothing and still notices changes; Mode=inotify and auto watch a local disk")
    func modes() async throws {
        for mode in WatchMode.allCases {
            let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600)) { $0.watchMode = mode }
            try FileManager.default.createDirectory(atPath: harness.file("d"), withIntermediateDirectories: true)
            try Disk.write("one\n", to: harness.file("d/a.txt"))
            await harness.store.openAll()
            try await harness.store.startWatching()
            let summary = try #require(await harness.store.watchSummary)
            #expect(summary.mode == mode)
            #expect(summary.watchedDirectories == (mode == .poll ? 0 : 2), "\(mode)")
            #expect(summary.polledByChoice == (mode == .poll ? 2 : 0), "\(mode)")
            try Disk.write("two\n", to: harness.file("d/.x"))
            #expect(rename(harness.file("d/.x"), harness.file("d/a.txt")) == 0)
            try FileManager.default.createDirectory(atPath: harness.file("e"), withIntermediateDirectories: true)
            try Disk.write("new\n", to: harness.file("e/b.txt"))
            await harness.store.sync()
            #expect(try await harness.store.read("d/a.txt") == .text("two\n"), "\(mode)")
            #expect(await harness.store.isOpen("e/b.txt"), "\(mode): the new file was noticed")
            await harness.store.stopWatching()
        }
    }

    /// A store watching a root holding `files`, in `mode`; polls only when the test syncs.
    func watching(
        _ mode: WatchMode, _ files: [String: String], configure: (inout Configuration) -> Void = { _ in }
    ) async throws -> StoreHarness {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600)) {
            $0.watchMode = mode
            $0.pollInterval = .seconds(3600)
            configure(&$0)
        }
        for (path, text) in files {
            try FileManager.default.createDirectory(
                atPath: PathName.parent(harness.file(path)), withIntermediateDirectories: true)
            try Disk.write(text, to: harness.file(path))
        }
        await harness.store.openAll()
        try await harness.store.startWatching()
        return harness
    }

    func sh(_ script: String, in harness: StoreHarness) throws {
        let result = try Machine.run("/bin/sh", ["-c", "cd '\(harness.root)' && " + script])
        #expect(result.status == 0, "\(script): \(result.stderr)")
    }

    @Test(
        "Files and a directory another program renamed: polling follows them as inotify does, unsaved edits with them, nothing written again under the old names",
        arguments: [WatchMode.inotify, .poll])
    func renamesFollowed(mode: WatchMode) async throws {
        let harness = try await watching(
            mode, ["clean.txt": "clean\n", "dirty.txt": "dirty\n", "notes/todo.txt": "todo\n"])
        try await harness.store.apply(.append("unsaved\n"), to: "dirty.txt")
        try await harness.store.apply(.append("unsaved too\n"), to: "notes/todo.txt")
        try sh("mv clean.txt clean2.txt && mv dirty.txt dirty2.txt && mv notes archive", in: harness)
        await harness.store.sync()
        #expect(
            await harness.store.list().map(\.path) == ["archive/todo.txt", "clean2.txt", "dirty2.txt"], "\(mode)")
        #expect(try await harness.store.read("dirty2.txt") == .text("dirty\nunsaved\n"), "\(mode)")
        #expect(try await harness.store.read("archive/todo.txt") == .text("todo\nunsaved too\n"), "\(mode)")
        try await harness.store.saveAll(wait: true)
        #expect(try Disk.names(in: harness.root).sorted() == ["archive", "clean2.txt", "dirty2.txt"], "\(mode)")
        #expect(try harness.text(onDisk: "dirty2.txt") == "dirty\nunsaved\n", "\(mode)")
        await harness.store.stopWatching()
    }

    @Test(
        "A file rewritten in place with its size and modification time kept (cp -p): polling reads it again as inotify does",
        arguments: [WatchMode.inotify, .poll])
    func inPlaceRewriteKeepingSizeAndTime(mode: WatchMode) async throws {
        let harness = try await watching(mode, ["a.txt": "version A\n"])
        try sh("printf 'version B\\n' > ../srcB && touch -r a.txt ../srcB && cp -p ../srcB a.txt", in: harness)
        await harness.store.sync()
        #expect(try await harness.store.read("a.txt") == .text("version B\n"), "\(mode)")
        await harness.store.stopWatching()
    }

    @Test(
        "A directory replaced by a file: polling closes the documents that were in it as inotify does, and opens the file",
        arguments: [WatchMode.inotify, .poll])
    func directoryReplacedByAFile(mode: WatchMode) async throws {
        let harness = try await watching(mode, ["d/a.txt": "a\n"])
        try sh("rm -r d && printf 'now a file\\n' > d", in: harness)
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["d"], "\(mode)")
        await harness.store.stopWatching()
    }

    @Test(
        "Changes made before the ignore rules change (a reload), then a poll: every change is still seen, as with inotify",
        arguments: [WatchMode.inotify, .poll])
    func changesBeforeTheRulesChange(mode: WatchMode) async throws {
        let harness = try await watching(mode, ["a.txt": "version A\n", "gone.txt": "g\n"])
        try sh("printf 'version B, longer\\n' > a.txt && rm gone.txt", in: harness)
        var configuration = await harness.store.configuration
        configuration.ignore = ["*.bak"]
        await harness.store.reconfigure(configuration)
        await harness.store.sync()
        #expect(try await harness.store.read("a.txt") == .text("version B, longer\n"), "\(mode)")
        #expect(await harness.store.list().map(\.path) == ["a.txt"], "\(mode)")
        await harness.store.stopWatching()
    }
}
