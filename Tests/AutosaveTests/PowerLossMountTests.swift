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
}
