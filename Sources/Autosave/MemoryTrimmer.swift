import Glibc
import Logging
import Posix

/// Gives back to the system the memory glibc's allocator keeps after a passing peak.
///
/// A burst of work (a `save-all` that makes thousands of documents due at once, a large
/// request) allocates far more than the daemon keeps afterwards; glibc's `malloc` keeps
/// the freed pages in its arenas (the daemon keeps one for all its threads,
/// ``Daemon/prepareProcess()``; and only the top of a heap is ever returned on its own),
/// so resident memory rises in steps with each new peak and never comes down, although
/// the live data does not grow. Every `interval`
/// the trimmer asks the allocator how much it holds free (`mallinfo2`) and, when that is
/// both at least `minimumFree` bytes and a quarter of what is in use, calls
/// `malloc_trim(0)`, which releases every whole free page of every arena (`madvise`);
/// the pages come back, zeroed, only when they are used again. It runs on a thread of
/// its own, so the pause (each arena is locked while it is walked, a few milliseconds
/// for tens of megabytes) holds up a task of the daemon only when it allocates what its
/// thread's cache of small blocks cannot give meanwhile.
package final class MemoryTrimmer: Sendable {
    package struct Totals: Sendable {
        package var trims = 0
        package var released = 0  // bytes of resident memory, as /proc/self/statm saw it go
        package var nanoseconds: UInt64 = 0  // spent in malloc_trim
        package var longest: UInt64 = 0
    }

    private let state = Lock<(stopping: Bool, totals: Totals)>((false, Totals()))
    private let wake = Lock<Int>(0)
    private let interval: Duration
    private let minimumFree: Int

    package init(interval: Duration = .seconds(5), minimumFree: Int = 4 << 20) {
        self.interval = interval
        self.minimumFree = minimumFree
    }

    package var totals: Totals { state.withLock { $0.totals } }

    /// Starts the trimmer's thread.
    func start() {
        NamedThread.start("memory-trim") { [self] in run() }
    }

    /// Stops the thread (at its next wake-up; it holds nothing that needs waiting for).
    func stop() { state.withLock { $0.stopping = true } }

    private func run() {
        let seconds = interval.components.seconds
        let micros = interval.components.attoseconds / 1_000_000_000_000
        while true {
            // In slices of at most 100 ms, so that stop() is seen soon.
            var left = seconds * 1_000_000 + micros
            while left > 0 {
                if state.withLock({ $0.stopping }) { return }
                let slice = min(left, 100_000)
                usleep(UInt32(slice))
                left -= slice
            }
            if state.withLock({ $0.stopping }) { return }
            trimIfWorthIt()
        }
    }

    /// One check, and a trim when the free memory is worth it; whether it trimmed.
    @discardableResult
    package func trimIfWorthIt() -> Bool {
        let (free, used, _) = Allocator.usage()
        guard free >= minimumFree, free >= used / 4 else { return false }
        let before = Self.residentBytes()
        var start = timespec()
        var end = timespec()
        clock_gettime(CLOCK_MONOTONIC, &start)
        Allocator.trim()
        clock_gettime(CLOCK_MONOTONIC, &end)
        let elapsed = UInt64(max(0, (end.tv_sec - start.tv_sec) * 1_000_000_000 + (end.tv_nsec - start.tv_nsec)))
        let released = max(0, before - Self.residentBytes())
        state.withLock {
            $0.totals.trims += 1
            $0.totals.released += released
            $0.totals.nanoseconds += elapsed
            $0.totals.longest = max($0.totals.longest, elapsed)
        }
        return true
    }

    /// Resident memory of this process, from `/proc/self/statm` (0 when unreadable).
    package static func residentBytes() -> Int {
        let fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return 0 }
        let fields = buffer[0..<count].split(separator: UInt8(ascii: " "))
        guard fields.count > 1, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// What the trimmer did, for the log at exit.
    package var summary: String {
        let t = totals
        let mib = Double(t.released) / 1_048_576
        let total = Double(t.nanoseconds) / 1_000_000
        let longest = Double(t.longest) / 1_000_000
        return "memory trimmer: \(t.trims) trims returned \(format1(mib)) MiB to the system, "
            + "\(format1(total)) ms in malloc_trim in all (longest \(format1(longest)) ms)"
    }

    private func format1(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
}
