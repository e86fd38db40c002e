import Foundation
import Posix
import Synchronization

/// One thread that is both the store's executor (and the preferred task executor of the
/// connections' tasks) and the control socket's I/O loop, the way Redis serves every
/// client from one thread: it runs the jobs of the tasks isolated to the store (edits
/// from embedding code, the scheduler, the connections' waiting requests) and, when it
/// has none, blocks in `epoll_wait` — after polling for up to `[Control] BusyPoll=` when
/// it has just sent replies, so that a client's next request finds it awake. A readable
/// connection is handed to its ``ReadinessHandler`` right here (see
/// ``ConnectionReader``), which reads it and answers what needs no waiting on the spot;
/// other descriptors resume the task waiting for them. A request then costs its read and
/// its send and no hand-off between threads, and the replies of one pass go out with one
/// send per client before the loop polls again. The reads of a pass, and then its sends,
/// are made together, through io_uring with one system call for all (``BatchedIO``).
///
/// Descriptors are registered once, edge-triggered, for reading, and for writing only
/// once a write had to wait; readiness that arrives while nobody waits is remembered, so
/// a wait after `EAGAIN` needs no system call when data came in meanwhile.
///
/// `@unchecked Sendable`: the epoll and eventfd descriptors are owned by the loop and
/// closed when it is deallocated; the kernel serialises `epoll_ctl` and
/// `epoll_wait` across threads; the job queue and the waiter table are behind mutexes,
/// and `localFlushes` is touched only on the loop's thread.
final class EventLoop: SerialExecutor, @unchecked Sendable {
    private struct Waiters {
        var read: UnsafeContinuation<Bool, Never>?
        var write: UnsafeContinuation<Bool, Never>?
        var readReady = false
        var writeReady = false
        /// The peer closed (or the socket broke): reads never wait again.
        var peerClosed = false
        /// A connection whose output waits for the socket to become writable.
        var blockedWriter: Connection?
        /// Called for read readiness instead of resuming a wait (see ``attach(_:_:)``).
        var handler: (any ReadinessHandler)?
        /// Registered for writability too: only once a write had to wait, as Redis does,
        /// so a client reading its replies does not queue an event here for each one.
        var watchingWrites = false

        /// Hands `events` to whoever waits for them, or remembers them.
        mutating func take(
            _ events: Epoll.Events, handlers: inout [(handler: any ReadinessHandler, peerClosed: Bool)],
            resumed: inout [UnsafeContinuation<Bool, Never>], writable: inout [Connection]
        ) {
            let broken = !events.isDisjoint(with: [.error, .hangUp])
            if broken || events.contains(.peerClosed) { peerClosed = true }
            if broken || !events.isDisjoint(with: [.readable, .peerClosed]) {
                if let handler {
                    handlers.append((handler, peerClosed))
                } else if let read {
                    resumed.append(read)
                    self.read = nil
                } else {
                    readReady = true
                }
            }
            if broken || events.contains(.writable) {
                if let write {
                    resumed.append(write)
                    self.write = nil
                } else if let blockedWriter {
                    writable.append(blockedWriter)
                    self.blockedWriter = nil
                } else {
                    writeReady = true
                }
            }
        }

        /// Takes readiness seen while nobody waited: `true` if a wait need not block.
        mutating func takeReadiness(write: Bool) -> Bool {
            if write {
                defer { writeReady = false }
                return writeReady
            }
            if peerClosed { return true }
            defer { readReady = false }
            return readReady
        }
    }

    /// The waiters by descriptor number, in an array: descriptor numbers are small and
    /// dense, and every readiness event looks one up.
    private struct WaiterTable {
        private var slots: [Waiters?] = []

        subscript(raw: Int32) -> Waiters? {
            get { Int(raw) < slots.count ? slots[Int(raw)] : nil }
            _modify {
                let index = Int(raw)
                if index >= slots.count {
                    slots.append(contentsOf: repeatElement(nil, count: max(index + 1, 2 * slots.count) - slots.count))
                }
                yield &slots[index]
            }
        }

        /// Runs `body` on the waiters of `raw` in place; `nil` when there are none. (The
        /// readiness path's access: the subscript's accessor coroutine allocates its frame.)
        mutating func update<R>(_ raw: Int32, _ body: (inout Waiters) -> R) -> R? {
            let index = Int(raw)
            guard index < slots.count, slots[index] != nil else { return nil }
            return body(&slots[index]!)
        }

        mutating func removeValue(forKey raw: Int32) -> Waiters? {
            guard Int(raw) < slots.count else { return nil }
            defer { slots[Int(raw)] = nil }
            return slots[Int(raw)]
        }

        var values: [Waiters] { slots.compactMap { $0 } }
    }

    private struct Jobs {
        /// Jobs and whether each came through ``taskExecutor``.
        var queue: [(job: UnownedJob, forTask: Bool)] = []
        /// Connections with output to write before the loop next sleeps.
        var flushes: [Connection] = []
        /// Descriptors whose handler stopped reading before `EAGAIN`: called again next pass.
        var reads: [Int32] = []
        /// Work handed to the loop from other threads (see ``execute(_:)``).
        var closures: [@Sendable () -> Void] = []
        /// The timer's deadline (`CLOCK_BOOTTIME` nanoseconds) and what it then does (see ``setTimer(at:_:)``).
        var timer: (deadline: Int64, action: @Sendable () -> Void)?
        /// The loop is (about to be) blocked in `epoll_wait`: a new job must wake it.
        var sleeping = false
    }

    private let epoll: Epoll
    private let wakeup: FileDescriptor
    /// Where connections read their requests, on the loop's thread only (see
    /// ``ConnectionReader``): one buffer for all, so memory does not grow with the number
    /// of clients and the reads of a pass stay in the same cache lines.
    let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 64)
    private let waiters = Lock(WaiterTable())
    private let jobs = Lock(Jobs())
    private let stopping = Atomic<Bool>(false)
    /// The loop thread's `pthread_t`, once it runs.
    private let thread = Atomic<UInt>(0)
    private static let wakeupTag = UInt64.max
    /// How long the loop polls for new requests before it sleeps, in nanoseconds
    /// (`[Control] BusyPoll=`); zero: it sleeps at once.
    private let busyPoll = Atomic<Int64>(0)

    /// Busy polls that found work before `BusyPoll=` ran out, those that ran out (the loop
    /// then slept), and the nanoseconds spent polling: for the metrics.
    private let pollsCaught = Atomic<UInt64>(0)
    private let pollsRanOut = Atomic<UInt64>(0)
    private let pollNanoseconds = Atomic<UInt64>(0)

    /// What the loop's polls before sleeping (`BusyPoll=`) came to: how many found work,
    /// how many ran out, and the time they took.
    var busyPollFigures: (caught: UInt64, ranOut: UInt64, seconds: Double) {
        (
            pollsCaught.load(ordering: .relaxed), pollsRanOut.load(ordering: .relaxed),
            Double(pollNanoseconds.load(ordering: .relaxed)) / 1e9
        )
    }

    /// Sets how long the loop polls for a client's next request after serving one before
    /// it sleeps (`[Control] BusyPoll=`); zero: it sleeps at once.
    func setBusyPoll(_ span: Duration) { busyPoll.store(span.microseconds * 1000, ordering: .relaxed) }

    /// The pass's reads and replies, each made together (``BatchedIO``).
    let batched: BatchedIO

    /// Has the loop make a pass's reads, and its sends, together through io_uring
    /// (`[Control] IOUring=`), or one system call each; applied in the loop's next pass.
    /// `done` runs on the loop's thread once it is.
    func setIOURing(_ on: Bool, done: @escaping @Sendable (BatchedIO) -> Void = { _ in }) {
        execute { [batched] in
            batched.setRing(on)
            done(batched)
        }
    }

    /// `ioURing`: whether a pass's reads and sends go through io_uring (``BatchedIO``).
    init(name: String = "autosaved-loop", ioURing: Bool = true) throws {
        batched = BatchedIO(ring: ioURing)
        epoll = try Epoll()
        wakeup = try FileDescriptor.eventFD()
        try epoll.add(wakeup, events: .readable, tag: Self.wakeupTag)
        taskExecutor.loop.withLock { $0 = self }
        NamedThread.start(name) { [self] in self.run() }
    }

    // MARK: The executor

    func enqueue(_ job: consuming ExecutorJob) { enqueue(UnownedJob(job), forTask: false) }

    fileprivate func enqueue(_ job: UnownedJob, forTask: Bool) { addWork { $0.queue.append((job, forTask)) } }

    /// Adds work for the loop and wakes it if it sleeps.
    private func addWork(_ add: (inout Jobs) -> Void) {
        let wake = jobs.withLock { jobs in
            add(&jobs)
            defer { jobs.sleeping = false }
            return jobs.sleeping
        }
        if wake { signal() }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    /// Has `connection`'s queued output written before the loop next sleeps.
    func scheduleFlush(_ connection: Connection) {
        if isCurrent {
            localFlushes.append(connection)
        } else {
            addWork { $0.flushes.append(connection) }
        }
    }

    /// Flushes scheduled on the loop's own thread (most of them: replies are written
    /// there), kept without a lock. Touched only on the loop's thread.
    /// Exempt from the runtime's exclusivity checks: appended to once per reply, on one thread.
    @exclusivity(unchecked) private var localFlushes: [Connection] = []

    /// Runs on the loop's thread in every pass, right before the pass writes its replies: the
    /// store writes the pass's journal records there, so that every reply follows the
    /// records of the edits it acknowledges. When that write fails it returns the LSN that
    /// the pass's replies acknowledging unwritten records wait for (until the journal has
    /// written and synced it again); the pass's other replies go out.
    /// Set and read on the loop's thread only.
    @exclusivity(unchecked) var beforeReplies: (() -> UInt64?)?

    /// Runs on the loop's thread at the end of every pass, before it polls: `willSleep`
    /// when nothing is left to do and the loop is about to block. Returns `true` when it
    /// did work that may have queued more (the loop then makes another pass before it
    /// polls). The store starts the journal's group commit there: on the loop itself
    /// when the loop would only sleep until the sync thread had done it. Set and read on
    /// the loop's thread only.
    @exclusivity(unchecked) var beforePolling: ((_ willSleep: Bool) -> Bool)?

    /// Runs on the loop's thread in every pass, right after the pass wrote its replies:
    /// the store writes the log entries of the pass's work there, off the path from a
    /// request to its reply. Set and read on the loop's thread only.
    @exclusivity(unchecked) var afterReplies: (() -> Void)?

    /// Runs `body` on the loop's thread in its next pass, between jobs: how a thread that
    /// finished work for the store (a save) hands its result back with one wake-up and
    /// no task.
    func execute(_ body: @escaping @Sendable () -> Void) { addWork { $0.closures.append(body) } }

    /// Has `action` run on the loop's thread once `CLOCK_BOOTTIME` reaches `deadline`
    /// (nanoseconds), replacing the timer set before; `nil` cancels it. The loop sleeps in
    /// `epoll_wait` with the timer's timeout, so a timer costs no thread of its own.
    func setTimer(at deadline: Int64?, _ action: @escaping @Sendable () -> Void = {}) {
        addWork { $0.timer = deadline.map { ($0, action) } }
    }

    /// Has the handler of `fd` called again in the next pass, after everyone else's
    /// readiness: a handler that reads a bounded amount per call asks for this when more
    /// may be waiting, since an edge-triggered descriptor brings no new readiness for it.
    func readAgain(_ fd: FileDescriptor) { addWork { $0.reads.append(fd.rawValue) } }

    /// Flushes `connection` again once its socket is writable.
    private func blockWriter(_ connection: Connection) {
        let raw = connection.raw
        let retry: Bool = waiters.withLock { all in
            // Not pollable: the connection is going away.
            guard register(raw, in: &all), watchWrites(raw, in: &all) else { return false }
            if all[raw]!.takeReadiness(write: true) { return true }
            all[raw]!.blockedWriter = connection
            return false
        }
        if retry { scheduleFlush(connection) }
    }

    private static let readEvents: Epoll.Events = [.readable, .peerClosed, .edgeTriggered]

    /// Registers `raw` with epoll (once: edge-triggered, for reading); `false` if it cannot be.
    private func register(_ raw: Int32, in all: inout WaiterTable) -> Bool {
        if all[raw] != nil { return true }
        do {
            try epoll.add(FileDescriptor(rawValue: raw), events: Self.readEvents, tag: UInt64(raw))
        } catch {
            return false
        }
        all[raw] = Waiters()
        return true
    }

    /// Adds writability to a registered descriptor's events (once). A socket that is
    /// writable already reports so at once.
    private func watchWrites(_ raw: Int32, in all: inout WaiterTable) -> Bool {
        if all[raw]!.watchingWrites { return true }
        do {
            try epoll.modify(
                FileDescriptor(rawValue: raw), events: Self.readEvents.union(.writable), tag: UInt64(raw))
        } catch {
            return false
        }
        all[raw]!.watchingWrites = true
        return true
    }

    /// The loop as the preferred executor of the connections' tasks: their nonisolated
    /// parts (and a wait resumed outside the store) run here too, never on the global pool.
    let taskExecutor = LoopTaskExecutor()

    /// Whether the caller runs on the loop's thread.
    var isCurrent: Bool { thread.load(ordering: .relaxed) == UInt(pthread_self()) }

    func checkIsolated() {
        precondition(isCurrent, "not on the store's thread")
    }

    private func signal() {
        try? wakeup.signalEventFD()
    }

    /// Stops the loop thread; every waiter is resumed with `false`. Jobs queued after
    /// this never run: stop the loop only once nothing uses the store.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        signal()
    }

    // MARK: Readiness

    /// Registers `fd` and has `handler` called on the loop's thread whenever it becomes
    /// readable (or its peer hangs up), instead of resuming a task: the way Redis serves
    /// its clients. `false` if `fd` cannot be polled.
    func attach(_ fd: FileDescriptor, _ handler: any ReadinessHandler) -> Bool {
        waiters.withLock { all in
            guard !stopping.load(ordering: .relaxed), register(fd.rawValue, in: &all) else { return false }
            all[fd.rawValue]!.handler = handler
            return true
        }
    }

    /// Waits until `fd` is readable (or has hung up). `false` when `fd` was forgotten or the loop stopped.
    func readable(_ fd: FileDescriptor, isolation: isolated (any Actor)? = #isolation) async -> Bool {
        await wait(fd, write: false)
    }

    /// Waits until `fd` is writable (or has hung up). `false` when `fd` was forgotten or the loop stopped.
    func writable(_ fd: FileDescriptor, isolation: isolated (any Actor)? = #isolation) async -> Bool {
        await wait(fd, write: true)
    }

    /// Runs on the caller's executor (`isolation`): a connection served on the store's
    /// thread stays there while it waits and when it resumes.
    private func wait(_ fd: FileDescriptor, write: Bool, isolation: isolated (any Actor)? = #isolation) async -> Bool {
        let raw = fd.rawValue
        // Readiness that came while nobody waited, or the first wait: register.
        let early: Bool? = waiters.withLock { all in
            if stopping.load(ordering: .relaxed) || !register(raw, in: &all) { return false }
            if write, !watchWrites(raw, in: &all) { return false }
            return all[raw]!.takeReadiness(write: write) ? true : nil
        }
        if let early { return early }
        // No cancellation handler (its status record costs a lock on every wait): a wait
        // ends when the descriptor is ready, is forgotten, or the loop stops. To end a
        // connection's waits, shut its socket down: readiness follows at once.
        return await withUnsafeContinuation(isolation: isolation) { (continuation: UnsafeContinuation<Bool, Never>) in
            let immediate: Bool? = waiters.withLock { all in
                if stopping.load(ordering: .relaxed) { return false }
                guard var entry = all[raw] else { return false }  // forgotten meanwhile
                if entry.takeReadiness(write: write) {
                    all[raw] = entry
                    return true
                }
                if write { entry.write = continuation } else { entry.read = continuation }
                all[raw] = entry
                return nil
            }
            if let immediate { continuation.resume(returning: immediate) }
        }
    }

    /// Ends every wait for `fd` to become readable, now and later, as a hang-up of its
    /// peer would — without touching the socket itself. A listening socket systemd passed
    /// is shared with systemd: shut down, it would hang up for systemd too (which then
    /// fails the socket unit) and for the next daemon given it. Forget it before closing.
    func end(_ fd: FileDescriptor) {
        let raw = fd.rawValue
        let resumed: UnsafeContinuation<Bool, Never>? = waiters.withLock { all in
            // Not registered yet: an entry of its own, which the next wait finds ended.
            var entry = all[raw] ?? Waiters()
            entry.peerClosed = true
            let read = entry.read
            entry.read = nil
            all[raw] = entry
            return read
        }
        resumed?.resume(returning: true)
    }

    /// Forgets `fd` before it is closed: pending waits end with `false`.
    func forget(_ fd: FileDescriptor) {
        let raw = fd.rawValue
        let resumed: [UnsafeContinuation<Bool, Never>] = waiters.withLock { all in
            guard let entry = all.removeValue(forKey: raw) else { return [] }
            try? epoll.remove(fd)
            return [entry.read, entry.write].compactMap { $0 }
        }
        for continuation in resumed { continuation.resume(returning: false) }
    }

    // MARK: The loop

    private func run() {
        thread.store(UInt(pthread_self()), ordering: .relaxed)
        let executor = asUnownedSerialExecutor()
        let taskExecutor = self.taskExecutor.asUnownedTaskExecutor()
        var batch: [(job: UnownedJob, forTask: Bool)] = []
        var flushes: [Connection] = []
        var reads: [Int32] = []
        var handlers: [(handler: any ReadinessHandler, peerClosed: Bool)] = []
        var ahead: [ReadAhead?] = []
        // The handlers of readable descriptors are called in order, after the reads they
        // would make first are made together (see ``BatchedIO``).
        func serve() {
            batched.receive(handlers, into: &ahead)
            for index in handlers.indices {
                handlers[index].handler.readable(peerClosed: handlers[index].peerClosed, ahead: ahead[index])
            }
            handlers.removeAll(keepingCapacity: true)
            ahead.removeAll(keepingCapacity: true)
        }
        let ready = Epoll.Reports()
        // Descriptors other than the loop's own eventfd the last poll found ready.
        var readyConnections = 0
        // Replies were sent since the loop last slept (not merely queued, or held for the
        // journal's sync): it polls before sleeping (`BusyPoll=`).
        var answered = false
        // The length of the next poll before sleeping, in nanoseconds, adapted between zero
        // and `BusyPoll=` (below); -1: not set yet, `BusyPoll=` itself.
        var window: Int64 = -1
        // Jobs come for the store (as its serial executor) and for the connections' tasks
        // (as their preferred task executor). Both run here, one at a time, so a
        // connection's job may be isolated to the store as well: its next call into the
        // store needs no hop.
        func runJobs() {
            jobs.withLock { jobs in swap(&batch, &jobs.queue) }
            for (job, forTask) in batch {
                if forTask {
                    job.runSynchronously(isolatedTo: executor, taskExecutor: taskExecutor)
                } else {
                    job.runSynchronously(on: executor)
                }
            }
            batch.removeAll(keepingCapacity: true)
        }
        while !stopping.load(ordering: .relaxed) {
            runJobs()
            let (closures, due): ([@Sendable () -> Void], (@Sendable () -> Void)?) = jobs.withLock { jobs in
                var taken: [@Sendable () -> Void] = []
                swap(&taken, &jobs.closures)
                guard let timer = jobs.timer, timer.deadline <= Moment.now.nanoseconds else { return (taken, nil) }
                jobs.timer = nil
                return (taken, timer.action)
            }
            for closure in closures { closure() }
            due?()
            // What those resumed (the task of a request waiting for a save that just ended)
            // runs now, so that its reply goes out in this pass rather than after another poll.
            if !closures.isEmpty || due != nil { runJobs() }
            jobs.withLock { jobs in swap(&reads, &jobs.reads) }
            if !reads.isEmpty {
                waiters.withLock { all in
                    for raw in reads {
                        if let entry = all[raw], let handler = entry.handler {
                            handlers.append((handler, entry.peerClosed))
                        }
                    }
                }
                reads.removeAll(keepingCapacity: true)
                serve()
            }
            // Once no job is left, the replies of this round go out, one write per client.
            let queueEmpty: Bool = jobs.withLock { jobs in
                guard jobs.queue.isEmpty else { return false }
                swap(&flushes, &jobs.flushes)
                return true
            }
            if queueEmpty, !localFlushes.isEmpty {
                // Swapped, not copied: a copy would retain every connection once more.
                if flushes.isEmpty {
                    swap(&flushes, &localFlushes)
                } else {
                    flushes += localFlushes
                    localFlushes.removeAll(keepingCapacity: true)
                }
            }
            // A pass that sent replies to several connections polls once more before
            // sleeping: under load the clients' next requests are usually there already,
            // and a sleeping loop would have to be woken for them. After a poll that found
            // one connection ready, the client that has just been answered cannot have
            // sent again yet: that poll would find nothing, and the loop goes on to sleep.
            let idle = queueEmpty && (flushes.isEmpty || readyConnections <= 1)
            if let beforeReplies, let wait = beforeReplies() {
                for connection in flushes { connection.requireDurableIfUnwritten(through: wait) }
            }
            batched.send(flushes, wrote: &answered) { blockWriter($0) }
            flushes.removeAll(keepingCapacity: true)
            afterReplies?()
            let willSleep = idle && localFlushes.isEmpty
            if let beforePolling, beforePolling(willSleep) { continue }
            let sleep: Int32? =
                willSleep
                ? jobs.withLock { jobs in
                    guard jobs.queue.isEmpty, jobs.flushes.isEmpty, jobs.reads.isEmpty, jobs.closures.isEmpty
                    else { return nil }
                    jobs.sleeping = true
                    guard let timer = jobs.timer else { return -1 }
                    // Rounded up to whole milliseconds: never early.
                    let wait = (timer.deadline - Moment.now.nanoseconds + 999_999) / 1_000_000
                    return Int32(clamping: max(0, wait))
                } : nil
            // After passes that answered clients, the loop polls without sleeping for up
            // to `BusyPoll=` before it blocks, as Linux's busy polling of sockets does: a
            // client that sends its next request within that time finds the loop awake,
            // and neither the loop's wake-up nor (on a virtual machine) the exit of its
            // idle CPU to the host lies on the request's path. Work from other threads
            // still wakes it: `sleeping` is set, so they signal the eventfd, which the
            // poll sees. The poll's length adapts as KVM's polling of a halted vCPU does:
            // when the next work came later than `BusyPoll=` after the poll began (a
            // client that pauses longer), the next poll is half as long, down to none;
            // when it came within `BusyPoll=` but after the poll gave up, it doubles, up to
            // `BusyPoll=`. A slow client soon costs no polling at all.
            var polled = false
            // When this round's poll began, for the adapting: `nil` when there was none to make.
            var pollBegan: Int64?
            // The sleep's timeout, less what a poll took of it: the timer is not made late.
            var timeout = sleep ?? 0
            let limit = busyPoll.load(ordering: .relaxed)
            if let sleep, answered {
                answered = false
                if limit > 0 {
                    window = window < 0 ? limit : min(window, limit)
                    let start = Moment.now.nanoseconds
                    pollBegan = start
                    if window > 0 {
                        let until = sleep >= 0 ? min(start + window, start + Int64(sleep) * 1_000_000) : start + window
                        var now = start
                        repeat {
                            do { try epoll.wait(into: ready, timeout: 0) } catch { break }
                            polled = ready.count > 0
                            now = Moment.now.nanoseconds
                        } while !polled && now < until
                        if polled {
                            pollsCaught.wrappingAdd(1, ordering: .relaxed)
                        } else {
                            pollsRanOut.wrappingAdd(1, ordering: .relaxed)
                        }
                        pollNanoseconds.wrappingAdd(UInt64(max(0, now - start)), ordering: .relaxed)
                        if sleep > 0 {
                            let left = start + Int64(sleep) * 1_000_000 - now
                            timeout = Int32(clamping: max(0, (left + 999_999) / 1_000_000))
                        }
                    }
                } else {
                    window = -1
                }
            }
            if !polled {
                do { try epoll.wait(into: ready, timeout: timeout) } catch { continue }
                if let pollBegan {
                    if Moment.now.nanoseconds - pollBegan <= limit {
                        window = min(limit, max(2 * window, limit / 4))
                    } else {
                        window /= 2
                        if window < limit / 16 { window = 0 }
                    }
                }
            }
            if sleep != nil { jobs.withLock { $0.sleeping = false } }
            readyConnections = ready.count
            var resumed: [UnsafeContinuation<Bool, Never>] = []
            var writable: [Connection] = []
            waiters.withLock { all in
                for index in 0..<ready.count {
                    let (tag, events) = ready[index]
                    if tag == Self.wakeupTag {
                        readyConnections -= 1
                        var value: UInt64 = 0
                        _ = withUnsafeMutableBytes(of: &value) { try? wakeup.read(into: $0) }
                        continue
                    }
                    // Changed in place: a copy out and back would retain and release its references.
                    all.update(Int32(truncatingIfNeeded: tag)) {
                        $0.take(events, handlers: &handlers, resumed: &resumed, writable: &writable)
                    }
                }
            }
            if !writable.isEmpty { jobs.withLock { $0.flushes += writable } }
            // Served here, in arrival order: their replies go out before the loop next sleeps.
            serve()
            // Each resumed task is queued on its executor: this loop, for connections, so
            // they run in the next pass without waking anyone.
            for continuation in resumed { continuation.resume(returning: true) }
        }
        afterReplies?()
        let (remaining, attached): ([UnsafeContinuation<Bool, Never>], [any ReadinessHandler]) = waiters.withLock {
            all in
            defer { all = WaiterTable() }
            return (all.values.flatMap { [$0.read, $0.write].compactMap { $0 } }, all.values.compactMap(\.handler))
        }
        for continuation in remaining { continuation.resume(returning: false) }
        for handler in attached { handler.loopStopped() }
        self.taskExecutor.loop.withLock { $0 = nil }
    }

    /// The descriptors are closed only when nothing can use the loop any more: closed
    /// earlier, a late `epoll_ctl` or wake-up write could reach whatever reused the number.
    deinit {
        try? epoll.close()
        try? wakeup.close()
        readBuffer.deallocate()
    }
}

/// What ``EventLoop/attach(_:_:)`` calls, on the loop's thread.
protocol ReadinessHandler: AnyObject, Sendable {
    /// The descriptor became readable, its peer hung up, or ``EventLoop/readAgain(_:)``
    /// asked for it. `peerClosed`: the peer has closed its side (or the socket broke),
    /// so no further readiness will come — read on to the end of file. `ahead`: what the
    /// loop read for it after ``claimReadAhead()`` (its first read's outcome), if it did.
    func readable(peerClosed: Bool, ahead: ReadAhead?)
    /// The socket the loop may read for the handler, in its batch, before it calls
    /// ``readable(peerClosed:ahead:)``: only when that call would begin by reading it, and
    /// once until that call (`nil` after, and for handlers that read nothing).
    func claimReadAhead() -> Int32?
    /// The loop stopped: no readiness will come any more.
    func loopStopped()
}

/// ``EventLoop`` as a task executor (a separate object: a job's entry point tells the
/// loop which role it came through).
final class LoopTaskExecutor: TaskExecutor {
    /// Strong, not `weak` (a weak reference would give the loop a side table, and every
    /// retain and release of the loop would take the runtime's slow path): the loop
    /// clears it when its thread ends, which breaks the cycle. Jobs that come later are
    /// dropped, as for a stopped loop.
    fileprivate let loop = Lock<EventLoop?>(nil)

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.withLock { $0 }?.enqueue(job, forTask: true)
    }
}
