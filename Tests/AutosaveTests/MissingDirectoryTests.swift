import Autosave
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// A new document's directory that is not there is remembered as missing while inotify
/// watches every directory, and its next new documents are made without a look at the
/// disk (DocumentStore+MissingDirectories.swift). Whatever another program puts at its
/// place must end that: the look comes back, and with it what it finds.
@Suite("New documents in a directory that is not there", .serialized)
struct MissingDirectoryTests {
    @Test(
        "A directory remembered as missing, then made by another program: its file is opened and replaced, not taken for a conflict; a link put there is refused",
        .timeLimit(.minutes(1)))
    func madeByAnotherProgram() async throws {
        // New files are opened only when a client names them: the `set` below is the one that opens them.
        let daemon = try await RunningDaemon("[Watch]\nOpenNewFiles=no\n", quiet: "1h")
        for path in [
            "fresh/a.txt", "fresh/b.txt", "deep/er/a.txt", "deep/er/b.txt", "linked/er/a.txt", "linked/er/b.txt",
        ] {
            let set = try daemon.ctl("set", path, "--text", "new\n")
            #expect(set.status == 0, "\(path): \(set.stderr)")
        }
        // Another program makes directories with a file in each (`deep` above the one the
        // daemon found missing), and a link to a directory outside the root, where the
        // daemon found nothing.
        for directory in ["fresh", "deep/er"] {
            try FileManager.default.createDirectory(
                atPath: daemon.root + "/" + directory, withIntermediateDirectories: true)
            try Disk.write("theirs\n", to: daemon.root + "/" + directory + "/c.txt")
        }
        // The link is above the directory found missing: only the link is reported.
        let outside = daemon.directory.sub("outside")
        try FileManager.default.createDirectory(atPath: outside + "/er", withIntermediateDirectories: true)
        #expect(symlink(outside, daemon.root + "/linked") == 0)
        #expect(try daemon.ctl("sync").status == 0, "the watcher reported them")

        for directory in ["fresh", "deep/er"] {
            let set = try daemon.ctl("set", directory + "/c.txt", "--text", "mine\n")
            #expect(set.status == 0, "\(set.stderr)")
            let save = try daemon.ctl("save", directory + "/c.txt", "--wait")
            #expect(save.status == 0, "\(save.stderr)")
            #expect(
                try daemon.onDisk(directory + "/c.txt") == "mine\n",
                "\(directory): the other program's file, opened, was replaced")
            #expect(try Disk.names(in: daemon.root + "/" + directory) == ["c.txt"], "\(directory): no conflict copy")
        }

        let set = try daemon.ctl("set", "linked/er/c.txt", "--text", "mine\n")
        #expect(set.status != 0 && set.stderr.contains("symbolic link"), "refused: \(set.stderr)")
        #expect(try Disk.names(in: outside + "/er") == [], "nothing written outside the root")

        // The documents still unsaved can be saved at shutdown once the link is gone.
        #expect(unlink(daemon.root + "/linked") == 0)
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "Where directories are polled, nothing is remembered as missing: a link put where a new document's directory was not is refused at once",
        .timeLimit(.minutes(1)))
    func polledDirectories() async throws {
        // Polled, and not for an hour: only a look at the disk can see the link.
        let daemon = try await RunningDaemon("[Watch]\nMode=poll\nPollInterval=1h\nOpenNewFiles=no\n", quiet: "1h")
        for path in ["polled/a.txt", "polled/b.txt"] {
            let set = try daemon.ctl("set", path, "--text", "new\n")
            #expect(set.status == 0, "\(path): \(set.stderr)")
        }
        let outside = daemon.directory.sub("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        #expect(symlink(outside, daemon.root + "/polled") == 0)
        let set = try daemon.ctl("set", "polled/c.txt", "--text", "mine\n")
        #expect(set.status != 0 && set.stderr.contains("symbolic link"), "refused: \(set.stderr)")
        #expect(try Disk.names(in: outside) == [], "nothing written outside the root")
        #expect(unlink(daemon.root + "/polled") == 0)
        #expect(await daemon.stop() == 0)
    }
}
