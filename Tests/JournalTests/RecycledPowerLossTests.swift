import Foundation
@preconcurrency import Glibc
import Journal
import TestSupport
import Testing

/// The journal probe on the power-loss file system (Tests/Tools/powerloss_fs.py: a file's
/// data survives once fsynced, a directory's entries once it is) while segments are
/// recycled: a spare's rename, its new header and its first records each reach the disk
/// only with the sync that covers them, and a cut can come between any two.
@Suite(
    "Journal segments recycled, under simulated power loss",
    .enabled(if: PowerLossMount.isAvailable, "needs root, /dev/fuse and Debian's python3-fusepy"), .serialized)
struct RecycledPowerLossTests {
    static let keep = 4

    /// Starts the probe (Mode=always, 16 KiB segments, all but the last four batches of
    /// five released) on `directory`; returns it with its output lines.
    func probe(_ directory: String) throws -> (Process, ProcessLines) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Machine.product("JournalProbe"))
        process.arguments = [
            "append", directory, "--mode", "always", "--batch", "5", "--keep", String(Self.keep), "--segment-size",
            "16384",
        ]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        let lines = ProcessLines()
        lines.follow(out.fileHandleForReading, name: "journal-probe")
        try process.run()
        return (process, lines)
    }

    func stop(_ process: Process) {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    @Test(
        "Mode=always with segments recycled: after a cut at any point, every acknowledged batch not released is replayed",
        // Cuts throughout a run in which the first spares are made and then recycled (from
        // about the 60th sync on): after syncs, directory syncs and renames.
        arguments: stride(from: 60, to: 150, by: 3).map { PowerLossMount.CrashPoint("fsync", $0) }
            + (5..<14).map { PowerLossMount.CrashPoint("fsyncdir", $0) }
            + (3..<14).map { PowerLossMount.CrashPoint("rename", $0) })
    func cut(at point: PowerLossMount.CrashPoint) throws {
        let directory = TemporaryDirectory("journal-recycled-powerloss")
        let backing = directory.sub("backing")
        let mountPoint = directory.sub("mnt")
        for path in [backing, mountPoint] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        }
        let journal = mountPoint + "/journal"
        var acknowledged: [[UInt64]] = []
        do {
            let mount = try PowerLossMount(backing: backing, at: mountPoint, crash: point)
            let (process, lines) = try probe(journal)
            let crashed = mount.waitForCrash(within: .seconds(60))
            // What was acknowledged before the cut; nothing after it is (the syncs fail):
            // the probe says so once a batch waits for a sync that failed, after the lines
            // of every batch acknowledged before.
            let failed = lines.first(containing: "failed", within: .seconds(30))
            stop(process)
            lines.waitForEnd(within: .seconds(10))
            acknowledged = lines.all.dropFirst().filter { !$0.hasPrefix("failed") }.map {
                $0.split(separator: " ").compactMap { UInt64($0) }
            }
            try mount.unmount()
            #expect(crashed, "the cut after \(point) never came")
            #expect(failed != nil, "the probe never reported the failure that follows the cut after \(point)")
        }
        let recycled = acknowledged.last?[1] ?? 0
        #expect(
            recycled > 0, "the cut after \(point) came after segments were recycled (\(acknowledged.count) batches)")

        // Power back: replay delivers what the journal kept, and finds nothing but a torn tail wrong.
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        let (replayed, report, records) = try openJournal(journal)
        replayed.close()
        try mount.unmount()
        let delivered = Set(records.map(\.lsn))
        // One more batch may have been written, releasing the oldest of the last four, before its line.
        for batch in acknowledged.suffix(Self.keep - 1).map({ $0[2]...$0[0] }) {
            #expect(batch.allSatisfy(delivered.contains), "batch \(batch) was acknowledged and not released: \(report)")
        }
        if acknowledged.count >= Self.keep {
            let floor = acknowledged[acknowledged.count - Self.keep][2]
            #expect(delivered.allSatisfy { $0 >= floor }, "released records delivered: \(report)")
        }
        #expect(report.problems.allSatisfy { if case .tornTail = $0.kind { true } else { false } }, "\(report)")
    }
}
