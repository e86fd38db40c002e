import Foundation
import Posix
import TestSupport
import Testing

/// The power-loss file system's own harness: a file system that hangs must fail the
/// test that uses it, within a deadline, and leave nothing mounted.
@Suite(
    "The power-loss mount: a hung file system fails in time; the model keeps what was made durable",
    .enabled(if: PowerLossMount.isAvailable, "needs root, /dev/fuse and Debian's python3-fusepy"))
struct PowerLossMountTests {
    @Test(
        "A file system that never exits after the unmount is detached, killed and reported", .timeLimit(.minutes(1)))
    func hungFileSystem() throws {
        let directory = TemporaryDirectory("powerloss-hang")
        let backing = directory.sub("backing")
        let point = directory.sub("mnt")
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: false)
        let mount = try PowerLossMount(backing: backing, at: point)
        try Disk.write("x", to: point + "/f.txt")
        // Stopped, the process can neither serve a request nor exit: a hang.
        kill(mount.processIdentifier, SIGSTOP)
        let started = ContinuousClock.now
        var message = ""
        do { try mount.unmount(within: .seconds(2)) } catch { message = "\(error)" }
        let took = ContinuousClock.now - started
        print("PowerLossMountTests: unmount took \(took) and said: \(message)")
        #expect(message.contains("hung") && message.contains("killed"), "unmount said: \(message)")
        #expect(took < .seconds(40), "unmount took \(took)")
        // The process is gone and nothing is mounted at the point any more.
        #expect(kill(mount.processIdentifier, 0) != 0)
        let mounts = (try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? ""
        #expect(!mounts.contains(" \(point) "), "still mounted: \(point)")
    }

    @Test(
        "The model's own bookkeeping: an rmdir refused (ENOTEMPTY) leaves the directory's node, so an entry its later fsync made durable survives the cut"
    )
    func refusedRemovalKeepsTheNode() throws {
        let directory = TemporaryDirectory("powerloss-rmdir")
        let backing = directory.sub("backing")
        let point = directory.sub("mnt")
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: false)
        try Disk.write("x", to: backing + "/d/x")  // durable at mount
        let mount = try PowerLossMount(backing: backing, at: point)
        #expect(rmdir(point + "/d") != 0 && errno == ENOTEMPTY)
        #expect(FileManager.default.createFile(atPath: point + "/d/y", contents: Data("y".utf8)))
        let file = try #require(FileHandle(forWritingAtPath: point + "/d/y"))
        try file.synchronize()  // fsync: y's bytes durable
        try file.close()
        let parent = try FileDescriptor.open(point + "/d", .readOnly, options: [.directory])
        try parent.closeAfter { () throws(Errno) in try parent.sync() }  // y's entry durable
        try mount.unmount()  // the cut
        #expect(try Disk.names(in: backing + "/d") == ["x", "y"], "the durable entry y survived the cut")
    }

    @Test(
        "--reorder: a later rename in a directory not synced survives the cut without an earlier one (names follow inodes, and each rename is whole); a directory fsynced after its renames is never reordered"
    )
    func reorderedRenames() throws {
        var found: UInt64?
        for seed in UInt64(1)...64 {
            let directory = TemporaryDirectory("powerloss-reorder")
            let backing = directory.sub("backing")
            let point = directory.sub("mnt")
            try FileManager.default.createDirectory(atPath: backing + "/s", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: false)
            for name in ["a", "c", "s/a", "s/c"] { try Disk.write(name, to: backing + "/" + name) }  // durable at mount
            let mount = try PowerLossMount(backing: backing, at: point, reorderSeed: seed)
            // The root is never synced; s is, after its renames.
            #expect(rename(point + "/a", point + "/b") == 0 && rename(point + "/c", point + "/d") == 0)
            #expect(rename(point + "/s/a", point + "/s/b") == 0 && rename(point + "/s/c", point + "/s/d") == 0)
            let synced = try FileDescriptor.open(point + "/s", .readOnly, options: [.directory])
            try synced.closeAfter { () throws(Errno) in try synced.sync() }
            try mount.unmount()  // the cut

            #expect(try Disk.names(in: backing + "/s") == ["b", "d"], "seed \(seed): the synced directory")
            let names = try Disk.names(in: backing).filter { $0 != "s" }
            // Each rename whole: a or b, c or d; the bytes those of the file renamed.
            #expect(names.count == 2 && ["a", "b"].contains(names[0]) && ["c", "d"].contains(names[1]), "\(names)")
            for name in names {
                let original = name == "a" || name == "b" ? "a" : "c"
                #expect(try Disk.bytes(backing + "/" + name) == Data(original.utf8), "seed \(seed): \(name)")
            }
            // Only the root had changes not synced: two renames.
            let counts = try #require(mount.reordered, "seed \(seed): no reordered line")
            #expect(counts.directories == 1 && counts.kept + counts.dropped == 2, "seed \(seed): \(counts)")
            if names == ["a", "d"] {
                #expect(mount.reorderDecisions == ["dropped rename /a -> /b", "kept rename /c -> /d"])
                found = seed
                break
            }
        }
        print(
            "PowerLossMountTests: the later rename kept without the earlier one with seed \(found.map(String.init) ?? "none")"
        )
        #expect(found != nil, "no seed of 64 kept the later rename and dropped the earlier one")
    }
}
