import Foundation
import Posix

/// The threads that serialise and write saves: as many as saves run at once (the store
/// bounds that by `MaxConcurrentSaves=`), started when first needed and kept, each
/// waiting on one condition for the next save. A save handed over wakes one idle thread
/// — the one hand-off a write that blocks on the disk needs — instead of going through
/// a shared pool that starts and parks threads of its own.
final class SaveThreads: @unchecked Sendable {
    // @unchecked: `queue`, `idle` and `started` are used only with `condition` locked.
    private let condition = NSCondition()
    private var queue: [@Sendable () -> Void] = []
    private var idle = 0
    private var started = 0
    private var stopping = false

    /// Lets the threads end once the work handed over is done.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    func submit(_ work: @escaping @Sendable () -> Void) {
        condition.lock()
        queue.append(work)
        let start = idle < queue.count
        if start { started += 1 }
        let number = started
        condition.unlock()
        // Signalled once unlocked: a thread woken with the lock still held would wake only to
        // block on it, and be woken again when it is released.
        if !start { condition.signal() }
        if start {
            NamedThread.start("save-\(number)") { [self] in run() }
        }
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty {
                if stopping {
                    condition.unlock()
                    return
                }
                idle += 1
                condition.wait()
                idle -= 1
            }
            let work = queue.removeFirst()
            condition.unlock()
            work()
        }
    }
}
