import Control
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// The built daemon's threads all allocate from glibc's main arena (``Allocator/useOneArena(environment:)``),
/// unless the operator's environment sets the arena limit.
@Suite("The daemon's memory allocator", .serialized)
struct AllocatorArenaTests {
    /// The heaps glibc made for arenas other than the main one, in `/proc/PID/maps`: each
    /// is an anonymous region of 64 MiB aligned to 64 MiB (mapped whole, then made
    /// writable from its start as the arena grows, a page or so at a time).
    static func threadArenaHeaps(of pid: Int32) throws -> Int {
        let heapSize: UInt64 = 64 << 20
        let maps = try String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8)
        // Anonymous mappings only: no path after the inode.
        let anonymous: [(start: UInt64, end: UInt64)] = maps.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count == 5 else { return nil }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let start = UInt64(range[0], radix: 16), let end = UInt64(range[1], radix: 16)
            else { return nil }
            return (start, end)
        }
        var heaps = 0
        for (index, mapping) in anonymous.enumerated() where mapping.start % heapSize == 0 {
            var end = mapping.end
            var next = index + 1
            while end < mapping.start + heapSize, next < anonymous.count, anonymous[next].start == end {
                end = anonymous[next].end
                next += 1
            }
            if end == mapping.start + heapSize { heaps += 1 }
        }
        return heaps
    }

    /// Starts the daemon with `environment` added to this process's, creates 2,000
    /// documents through the socket and saves them all (the loop, the journal's thread and
    /// the save threads all allocate), and returns the heaps of other arenas it then has.
    func heapsAfterWork(environment extra: [String: String]) async throws -> Int {
        let rig = try JournalRig()
        var changes: [String: String?] = ["MALLOC_ARENA_MAX": nil, "GLIBC_TUNABLES": nil]
        for (name, value) in extra { changes[name] = value }
        let daemon = try await rig.start(environment: changes)
        let client = try rig.client()
        for i in 0..<2000 {
            try rig.ok(
                ["cmd": "set", "doc": .string("new/doc\(i).txt"), "text": .string("document \(i)\n")], on: client)
        }
        let saved = try rig.ok(["cmd": "save-all", "wait": true], on: client)
        #expect(saved["unsaved"] == 0)
        #expect(try String(contentsOfFile: rig.root + "/new/doc1999.txt", encoding: .utf8) == "document 1999\n")
        return try Self.threadArenaHeaps(of: daemon.process.processIdentifier)
    }

    @Test("Every thread allocates from the main arena: no heap of another arena after documents are created and saved")
    func oneArena() async throws {
        #expect(try await heapsAfterWork(environment: [:]) == 0)
    }

    @Test(
        "An arena limit in the environment is the operator's: MALLOC_ARENA_MAX=8 gives the threads arenas of their own")
    func operatorsLimitKept() async throws {
        #expect(try await heapsAfterWork(environment: ["MALLOC_ARENA_MAX": "8"]) >= 1)
    }

    @Test("Allocator.useOneArena leaves the limit to an environment that sets it")
    func environmentDecides() {
        #expect(!Allocator.useOneArena(environment: { $0 == "MALLOC_ARENA_MAX" ? "4" : nil }))
        #expect(
            !Allocator.useOneArena(environment: {
                $0 == "GLIBC_TUNABLES" ? "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=2" : nil
            }))
    }
}
