import CLinux
import Glibc

/// glibc's `malloc`, as the daemon's memory trimmer sees it.
public enum Allocator {
    /// Bytes the allocator holds free (in its arenas, not returned to the system), in use
    /// in its arenas, and in use in blocks of their own (large allocations, each mapped
    /// apart and unmapped when freed), over every arena (`mallinfo2`). Locks each arena
    /// in turn while it counts.
    public static func usage() -> (free: Int, used: Int, mapped: Int) {
        var free = 0
        var used = 0
        var mapped = 0
        clinux_malloc_usage(&free, &used, &mapped)
        return (free, used, mapped)
    }

    /// Gives every whole free page of every arena back to the system (`malloc_trim(0)`);
    /// whether any memory was released.
    @discardableResult
    public static func trim() -> Bool { clinux_malloc_trim() != 0 }

    /// Has every thread allocate from glibc's main arena (`mallopt(M_ARENA_MAX, 1)`), unless
    /// the environment already chose (`MALLOC_ARENA_MAX`, or `arena_max` in `GLIBC_TUNABLES`);
    /// whether it set the limit. Effective only before a second thread has allocated: a
    /// program calls it first thing.
    ///
    /// Without it, each thread that allocates gets an arena of its own, which grows by
    /// `mprotect(2)` a page or so at a time (glibc pads only the main arena's growth, by
    /// `M_TOP_PAD`): a thread whose memory keeps growing — an event loop creating documents —
    /// makes a system call every few kilobytes, each taking the process's memory-map lock
    /// for writing, which also stalls other threads' page faults. The main arena grows with
    /// `brk(2)` in steps of `M_TOP_PAD` (128 KiB). Threads then share one lock on the paths
    /// that miss their per-thread cache (`tcache`, which serves small blocks without it).
    @discardableResult
    public static func useOneArena(environment: (String) -> String? = Allocator.environment) -> Bool {
        if environment("MALLOC_ARENA_MAX") != nil { return false }
        if let tunables = environment("GLIBC_TUNABLES"), tunables.contains("glibc.malloc.arena_max") { return false }
        return clinux_malloc_one_arena() == 1
    }

    /// The process's environment variable `name`.
    public static func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}
