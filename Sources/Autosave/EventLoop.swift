import Foundation
import Posix
import Synchronization

/// Readiness of non-blocking descriptors as `async` waits: one thread blocks in
/// `epoll_wait` and resumes the tasks waiting on the descriptors that became ready.
///
/// `@unchecked Sendable`: the epoll and eventfd descriptors are owned by the loop and
/// closed only by its thread as it ends; the kernel serialises `epoll_ctl` and
/// `epoll_wait` across threads, and the waiter table is behind a mutex.
final class EventLoop: @unchecked Sendable {
    private struct Waiters {
        var read: CheckedContinuation<Bool, Never>?
        var write: CheckedContinuation<Bool, Never>?
        var registered = false
    }

    private let epoll: Epoll
    private let wakeup: FileDescriptor
    private let waiters = Mutex<[Int32: Waiters]>([:])
    private let stopping = Atomic<Bool>(false)
    private static let wakeupTag = UInt64.max

    init() throws {
        epoll = try Epoll()
        wakeup = try FileDescriptor.eventFD()
        try epoll.add(wakeup, events: .readable, tag: Self.wakeupTag)
        let thread = Thread { [self] in self.run() }
        thread.name = "autosaved-io"
        thread.start()
    }

    /// Stops the loop thread; every waiter is resumed with `false`.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        let one: UInt64 = 1
        withUnsafeBytes(of: one) { try? wakeup.writeAll($0) }
    }

    /// Waits until `fd` is readable (or has hung up). `false` when the wait was cancelled.
    func readable(_ fd: FileDescriptor) async -> Bool { await wait(fd, write: false) }

    /// Waits until `fd` is writable (or has hung up). `false` when the wait was cancelled.
    func writable(_ fd: FileDescriptor) async -> Bool { await wait(fd, write: true) }

    private func wait(_ fd: FileDescriptor, write: Bool) async -> Bool {
        let raw = fd.rawValue
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let failed: Bool = waiters.withLock { all in
                    if Task.isCancelled || stopping.load(ordering: .relaxed) { return true }
                    var entry = all[raw] ?? Waiters()
                    if write { entry.write = continuation } else { entry.read = continuation }
                    let interest = Self.interest(entry)
                    do {
                        if entry.registered {
                            try epoll.modify(FileDescriptor(rawValue: raw), events: interest, tag: UInt64(raw))
                        } else {
                            try epoll.add(FileDescriptor(rawValue: raw), events: interest, tag: UInt64(raw))
                            entry.registered = true
                        }
                    } catch {
                        if write { entry.write = nil } else { entry.read = nil }
                        all[raw] = entry
                        return true
                    }
                    all[raw] = entry
                    return false
                }
                if failed { continuation.resume(returning: false) }
            }
        } onCancel: {
            cancelWaits(raw)
        }
    }

    private static func interest(_ entry: Waiters) -> Epoll.Events {
        var events: Epoll.Events = [.oneShot, .peerClosed]
        if entry.read != nil { events.insert(.readable) }
        if entry.write != nil { events.insert(.writable) }
        return events
    }

    private func cancelWaits(_ raw: Int32) {
        let resumed: [CheckedContinuation<Bool, Never>] = waiters.withLock { all in
            guard var entry = all[raw] else { return [] }
            let found = [entry.read, entry.write].compactMap { $0 }
            entry.read = nil
            entry.write = nil
            all[raw] = entry
            return found
        }
        for continuation in resumed { continuation.resume(returning: false) }
    }

    /// Forgets `fd` before it is closed: pending waits end with `false`.
    func forget(_ fd: FileDescriptor) {
        let raw = fd.rawValue
        let resumed: [CheckedContinuation<Bool, Never>] = waiters.withLock { all in
            guard let entry = all.removeValue(forKey: raw) else { return [] }
            if entry.registered { try? epoll.remove(fd) }
            return [entry.read, entry.write].compactMap { $0 }
        }
        for continuation in resumed { continuation.resume(returning: false) }
    }

    private func run() {
        while !stopping.load(ordering: .relaxed) {
            guard let ready = try? epoll.wait(timeout: -1) else { continue }
            var resumed: [(CheckedContinuation<Bool, Never>, Bool)] = []
            waiters.withLock { all in
                for (tag, events) in ready where tag != Self.wakeupTag {
                    let raw = Int32(truncatingIfNeeded: tag)
                    guard var entry = all[raw] else { continue }
                    let broken = !events.isDisjoint(with: [.error, .hangUp])
                    if let read = entry.read, broken || !events.isDisjoint(with: [.readable, .peerClosed]) {
                        resumed.append((read, true))
                        entry.read = nil
                    }
                    if let write = entry.write, broken || events.contains(.writable) {
                        resumed.append((write, true))
                        entry.write = nil
                    }
                    if entry.read != nil || entry.write != nil {
                        try? epoll.modify(FileDescriptor(rawValue: raw), events: Self.interest(entry), tag: tag)
                    }
                    all[raw] = entry
                }
            }
            for (continuation, value) in resumed { continuation.resume(returning: value) }
        }
        let remaining: [CheckedContinuation<Bool, Never>] = waiters.withLock { all in
            defer { all = [:] }
            return all.values.flatMap { [$0.read, $0.write].compactMap { $0 } }
        }
        for continuation in remaining { continuation.resume(returning: false) }
        try? epoll.close()
        try? wakeup.close()
    }
}
