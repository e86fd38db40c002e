import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// The daemon's memory trimmer: memory freed in the middle of the heap, which glibc
/// keeps by itself, goes back to the system when it is worth it, and only then.
@Suite("The memory trimmer", .serialized)
struct MemoryTrimmerTests {
    /// 40 MB in 4,000-byte blocks (below glibc's mmap threshold: in the heap), then all
    /// but every 64th freed — the last one kept, so the heap's top is not free and glibc
    /// returns nothing by itself. Not under a sanitizer, whose allocator is not glibc's.
    @Test("Freed pages between live blocks go back to the system", .enabled(if: Machine.isUnsanitized))
    func freedPagesGoBack() throws {
        var blocks: [UnsafeMutableRawPointer] = []
        for _ in 0..<10_000 {
            let block = malloc(4000)!
            memset(block, 1, 4000)
            blocks.append(block)
        }
        for (index, block) in blocks.enumerated() where index % 64 != 63 { free(block) }
        defer { for (index, block) in blocks.enumerated() where index % 64 == 63 { free(block) } }
        let before = MemoryTrimmer.residentBytes()
        let trimmer = MemoryTrimmer(minimumFree: 1 << 20)
        #expect(trimmer.trimIfWorthIt(), "the free memory (\(Allocator.usage())) was worth a trim")
        let after = MemoryTrimmer.residentBytes()
        #expect(before - after > 20_000_000, "resident before the trim \(before), after \(after)")
        #expect(trimmer.totals.trims == 1 && trimmer.totals.released > 20_000_000)
        #expect(trimmer.summary.hasPrefix("memory trimmer: 1 trims returned"))
    }

    @Test("Little free memory is left alone", .enabled(if: Machine.isUnsanitized))
    func littleFreeMemoryIsLeftAlone() {
        // More than the process could ever hold free.
        let trimmer = MemoryTrimmer(minimumFree: 1 << 50)
        #expect(!trimmer.trimIfWorthIt())
        #expect(trimmer.totals.trims == 0)
    }
}
