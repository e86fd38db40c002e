import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// The daemon's memory trimmer: memory freed in the middle of the heap, which glibc
/// keeps by itself, goes back to the system when it is worth it, and only then.
@Suite("The memory trimmer", .serialized)
struct MemoryTrimmerTests {
    /// Run in the probe, on its own heap: trimming the test process's heap would unmap
    /// pages under whatever else runs in it.
    static func probe(minimumFree: Int) throws -> [String: String] {
        let result = try Shell.execute(Machine.product("AutosaveProbe"), ["trim-check", "\(minimumFree)"])
        #expect(result.status == 0, "\(result)")
        let line = result.stdout.split(separator: "\n").first.map(String.init) ?? ""
        let words = line.split(separator: " ", maxSplits: 11).map(String.init)
        var fields: [String: String] = [:]
        var index = 0
        while index + 1 < words.count {
            fields[words[index]] = words[index + 1]
            index += 2
        }
        if let at = line.range(of: "summary ") { fields["summary"] = String(line[at.upperBound...]) }
        return fields
    }

    /// 40 MB in 4,000-byte blocks (below glibc's mmap threshold: in the heap), then all
    /// but every 64th freed — the last one kept, so the heap's top is not free and glibc
    /// returns nothing by itself. Not under a sanitizer, whose allocator is not glibc's.
    @Test("Freed pages between live blocks go back to the system", .enabled(if: Machine.isUnsanitized))
    func freedPagesGoBack() throws {
        let fields = try Self.probe(minimumFree: 1 << 20)
        #expect(fields["trimmed"] == "true", "the free memory was worth a trim: \(fields)")
        let before = Int(fields["before"] ?? "") ?? 0
        let after = Int(fields["after"] ?? "") ?? 0
        #expect(before - after > 20_000_000, "resident before the trim \(before), after \(after)")
        #expect(fields["trims"] == "1" && (Int(fields["released"] ?? "") ?? 0) > 20_000_000, "\(fields)")
        #expect(fields["summary"]?.hasPrefix("memory trimmer: 1 trims returned") == true, "\(fields)")
    }

    @Test("Little free memory is left alone", .enabled(if: Machine.isUnsanitized))
    func littleFreeMemoryIsLeftAlone() {
        // More than the process could ever hold free.
        let trimmer = MemoryTrimmer(minimumFree: 1 << 50)
        #expect(!trimmer.trimIfWorthIt())
        #expect(trimmer.totals.trims == 0)
    }
}
