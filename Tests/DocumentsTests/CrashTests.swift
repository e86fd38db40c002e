import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// A child process saves in a loop and is killed with SIGKILL at random moments. After
/// each kill the document must be one complete version, and recovery must leave no
/// temporary behind.
@Suite("Crash safety under SIGKILL", .serialized)
struct CrashTests {
    let directory = TemporaryDirectory("crash")
    static let kills = 200

    /// Starts the probe, waits for its first save, lets it run for a random moment
    /// inside its save loop, and kills it.
    func runAndKill(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Machine.probe)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Blocks until the child has completed one save in this run ("ready\n").
        let line = out.fileHandleForReading.readData(ofLength: 6)
        // Up to 20 ms: several saves at this disk's speed, and still more than one under a
        // sanitizer, whose slower code between saves once let 200 kills of 0–6 ms all miss
        // the temporary's window.
        usleep(UInt32.random(in: 0...20000))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try out.fileHandleForReading.close()
        #expect(String(decoding: line, as: UTF8.self) == "ready\n", "the probe failed before its first save")
    }

    @Test("Regular-file saves: always a complete old or new version")
    func fileSaves() throws {
        let path = directory.sub("doc.bin")
        var versions: Set<String> = []
        var leftovers = 0
        for _ in 0..<Self.kills {
            try runAndKill(["loop-file", path])
            let check = try Machine.run(Machine.probe, ["check-file", path])
            #expect(check.status == 0, "torn after a kill: \(check.stderr)")
            versions.insert(check.stdout)
            let report = try DurableWriter.recover(at: directory.path)
            leftovers += report.removed.count
            #expect(Disk.temporaries(under: directory.path).isEmpty)
            if check.status != 0 { break }
        }
        #expect(versions.count > Self.kills / 2, "the saves advanced between kills")
        #expect(leftovers > 0, "some kills landed inside a save (temporaries found and removed)")
    }

    @Test(
        "Atomic package saves: always a complete, consistent old or new package",
        arguments: ["--exchange", "--rename-aside"])
    func atomicPackageSaves(swap: String) throws {
        let path = directory.sub("doc.pkg")
        var leftovers = 0
        for _ in 0..<Self.kills {
            try runAndKill(["loop-package", path, "--atomic", swap, "--members", "6"])
            if swap == "--exchange" {
                // With the exchange, the destination names a complete package at every instant.
                let check = try Machine.run(Machine.probe, ["check-package", path])
                #expect(check.status == 0, "torn package after a kill: \(check.stderr)")
            }
            // Renaming aside leaves a window with no package under its name; recovery
            // (which the daemon runs at start-up) must close it with a complete one.
            let report = try DurableWriter.recover(at: directory.path)
            leftovers += report.removed.count + report.restored.count
            let check = try Machine.run(Machine.probe, ["check-package", path])
            #expect(check.status == 0, "torn package after recovery: \(check.stderr)")
            #expect(Disk.temporaries(under: directory.path).isEmpty)
            if check.status != 0 { break }
        }
        #expect(leftovers > 0, "some kills landed inside a save")
    }

    @Test("Recovery itself killed at random moments still leaves a consistent package")
    func killedRecovery() throws {
        let path = directory.sub("doc.pkg")
        for _ in 0..<20 {
            try runAndKill(["loop-package", path, "--atomic", "--rename-aside", "--members", "6"])
            // A recovery run killed as soon as it starts, then a full one.
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Machine.probe)
            process.arguments = ["recover", directory.path]
            try process.run()
            usleep(UInt32.random(in: 0...3000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            try DurableWriter.recover(at: directory.path)
            let check = try Machine.run(Machine.probe, ["check-package", path])
            #expect(check.status == 0, "\(check.stderr)")
            #expect(Disk.temporaries(under: directory.path).isEmpty)
        }
    }
}
