import Foundation
import Posix

extension DocumentStore {
    /// A conflict waiting for another program to finish writing the file.
    struct SettlingConflict {
        /// When the store first found the file still being written.
        var since: Moment
        /// Whether a look is scheduled.
        var lookPending: Bool
        /// What the look does: resolve the conflict (a save found the file changed) or
        /// compare the file with the disk again (the watcher reported the change).
        var resolves: Bool
        /// The package member whose change the watcher reported (compared again by the look).
        var member: String?
    }

    /// How long another program must have left a file (a package: every member) alone
    /// before its conflict with unsaved edits is resolved. A conflict copy made in the
    /// middle of that program's write — a file truncated and not written again yet, the
    /// first of several writes — would keep the half-written state: the copy of their
    /// version (`Keep=memory`), or their members under the edits (a package, `Keep=disk`).
    /// Watchman waits the same way (its settle period) before it reports a change.
    static let conflictSettle: Duration = .milliseconds(50)

    /// The longest a conflict waits for its file to settle: a file written without a
    /// pause (a log) is taken as it is after this.
    static let conflictSettleLimit: Duration = .seconds(2)

    /// Whether the conflict of `document` waits for its file to settle: another program
    /// changed the file (a package: a member) less than ``conflictSettle`` ago, and the
    /// conflict has not waited ``conflictSettleLimit`` yet. A look is then scheduled for
    /// when that change is ``conflictSettle`` old; `resolves` says what it does.
    func conflictWaitsToSettle(_ document: String, isPackage: Bool, resolves: Bool, member: String? = nil) -> Bool {
        let key = PathKey(document)
        // A look is due already: the file is looked at then, not at every report of a
        // write in progress (a package would be walked each time).
        if let settling = settlingConflicts[key], settling.lookPending {
            settlingConflicts[key]!.resolves = settling.resolves || resolves
            settlingConflicts[key]!.member = member ?? settling.member
            return true
        }
        guard let newest = Self.newestChange(root + "/" + document, isPackage: isPackage) else {
            settlingConflicts[key] = nil
            return false
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let age: Duration =
            .seconds(Int64(now.tv_sec) - Int64(newest.seconds))
            + .nanoseconds(Int64(now.tv_nsec) - Int64(newest.nanoseconds))
        let since = settlingConflicts[key]?.since ?? .now
        guard age < Self.conflictSettle, Moment.now - since < Self.conflictSettleLimit else {
            settlingConflicts[key] = nil
            return false
        }
        settlingConflicts[key] = SettlingConflict(
            since: since, lookPending: true, resolves: resolves, member: member)
        // A change time ahead of the clock (another host's, on a shared file system)
        // waits one whole period.
        let wait = age < .zero ? Self.conflictSettle : Self.conflictSettle - age
        Task { [weak self] in
            try? await Task.sleep(for: wait + .milliseconds(1))
            await self?.lookAfterSettling(document)
        }
        return true
    }

    private func lookAfterSettling(_ document: String) {
        let key = PathKey(document)
        guard let settling = settlingConflicts[key] else { return }
        settlingConflicts[key]!.lookPending = false
        if let entry = entries[document] {
            if !settling.resolves {
                checkExternalChange(document, member: settling.member)
            } else if entry.isDirty, !conflictWaitsToSettle(document, isPackage: entry.isPackage, resolves: true) {
                resolveConflict(document)
            }
        }
        // Resolved, found unchanged after all, or closed meanwhile: nothing waits any more.
        if settlingConflicts[key]?.lookPending == false { settlingConflicts[key] = nil }
        // The saves held back while the look was due (see processDue()), and those that
        // found the file being written (changeFoundBySave(_:)), are scheduled again: a
        // look that found the file as it was, or whose conflict copy could not be written,
        // would otherwise leave the edits unsaved and their `save --wait` unanswered.
        // (`schedule` leaves a clean or closed document alone.)
        if settlingConflicts[key] == nil { schedule(document) }
        if !settleWaiters.isEmpty, !settlingConflicts.values.contains(where: \.lookPending) {
            let waiters = settleWaiters
            settleWaiters = []
            for waiter in waiters { waiter.resume() }
        }
    }

    /// The latest change time of the file at `full`, or of any file or directory in the
    /// package at `full`; `nil` when it cannot be looked at.
    static func newestChange(_ full: String, isPackage: Bool) -> FileTime? {
        guard let status = try? FileDescriptor.currentWorkingDirectory.status(of: full) else { return nil }
        var newest = status.changed
        guard isPackage, let names = FileManager.default.enumerator(atPath: full) else { return newest }
        while let name = names.nextObject() as? String {
            if let member = try? FileDescriptor.currentWorkingDirectory.status(of: full + "/" + name),
                member.changed > newest
            {
                newest = member.changed
            }
        }
        return newest
    }
}
