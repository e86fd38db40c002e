import CLinux

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
}
