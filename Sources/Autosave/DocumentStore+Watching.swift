import Documents
import Foundation
import Logging
import Posix

extension DocumentStore {
    /// Starts watching the root with inotify (directories beyond the watch limit are
    /// polled). Changes by other programs are handled as they come, by the `[Watch]` and
    /// `[Conflicts]` policies: a document without unsaved edits is read again; one with
    /// unsaved edits gets a conflict copy; a removed document is written again or
    /// closed; a renamed one follows its file; a new file is opened. The store's own
    /// saves are recognised by the fingerprint they recorded and ignored.
    public func startWatching() throws {
        guard watcher == nil else { return }
        let log = log
        // Each batch is handed to the loop as it is read, in order, with one wake-up at
        // most (no task in between); a batch read after the watcher stopped is dropped.
        let generation = watchGeneration + 1
        watchGeneration = generation
        let registry = registry
        watcher = try FileWatcher(
            root: root, pollInterval: configuration.pollInterval, mode: configuration.watchMode, ignore: ignore,
            isPackageName: { registry.isPackage($0) },
            log: { message, isError in
                if isError {
                    log.error(message, ["message_id": MessageID.watchLimit])
                } else {
                    // No message ID: the catalog's entry for the ID explains the limit reached.
                    log.notice(message)
                }
            },
            deliver: { [weak self] batch in
                self?.onLoop { store in
                    if store.watchGeneration == generation, store.watcher != nil { store.handle(batch) }
                }
            })
        // The loop polls the inotify descriptor and kicks the watcher's thread: the
        // store's own saves (written on this thread) wake nobody from inside their system
        // calls (see ``FileWatcher/waitForKicks()``). Where the loop cannot poll it, the
        // thread keeps waiting for the descriptor itself.
        if let watcher, loop.attach(watcher.descriptor, WatcherKicker(watcher)) { watcher.waitForKicks() }
        if let watcher, let found = watcher.takeFilesFoundAtStart() { catchUp(with: found) }
    }

    /// What happened on disk before the watches were there — after the scan that opened
    /// the documents, while the journal was replayed, or while the watcher was off — is
    /// found in the watcher's first walk of the tree (each file's inode, size,
    /// modification and change time, read as its directory got its watch) and handled as
    /// its report would have been: a file no document holds is opened (`OpenNewFiles=`), a
    /// document's file that is not as the store last read or wrote it is compared with the
    /// disk, and a document whose file (or package directory, seen by its members) is gone
    /// is removed (the `WhenRemoved=` policy; each looks at the disk again first). A
    /// package's members are compared as their reports arrive, not here. Not called when
    /// the walk could not list the root: the watcher reports it gone instead.
    func catchUp(with found: [(path: String, stamp: FileWatcher.Stamp)]) {
        var batch: [WatchEvent] = []
        var present = Set<PathKey>()
        var reported = Set<PathKey>()
        for (path, stamp) in found {
            let document = documentPath(for: path)
            guard let entry = entries[document] else {
                // One report for a package not open, whatever its members.
                if reported.insert(PathKey(document)).inserted { batch.append(.changed(path)) }
                continue
            }
            present.insert(PathKey(document))
            guard document == path, !entry.isPackage else { continue }
            if let recorded = entry.fingerprint, !recorded.isDirectory, recorded.inode == stamp.inode,
                recorded.size == stamp.size, recorded.modified == stamp.modified, recorded.changed == stamp.changed
            {
                continue
            }
            batch.append(.changed(path))
        }
        for document in entries.keys where !present.contains(PathKey(document)) {
            if entries[document]?.fingerprint != nil { batch.append(.removed(document)) }
        }
        if !batch.isEmpty { handle(batch) }
    }

    public func stopWatching() {
        if let watcher { loop.forget(watcher.descriptor) }
        watcher?.stop()
        watcher = nil
        forgetMissingDirectories()
        watchGeneration += 1
        releaseSyncWaiters()
    }

    /// Counters of what the watcher caused: reloads of documents changed by other programs, and conflicts.
    public var watchCounters: (reloads: Int, conflicts: Int, overflows: Int) { (externalReloads, conflicts, overflows) }

    /// What the watcher is doing, for `status`: `nil` when the root is not watched.
    public var watchSummary: WatchSummary? {
        guard let watcher else { return nil }
        return WatchSummary(
            watchedDirectories: watcher.watchCount, polledDirectories: watcher.polledDirectories.count,
            mode: configuration.watchMode, polledByChoice: watcher.polledByChoice,
            unwatched: watcher.unwatchedDirectories, reloads: externalReloads, conflicts: conflicts,
            overflows: overflows)
    }

    /// Directories (relative to the root; `""` is the root) that are polled because the
    /// inotify watch limit left them without a watch.
    public var polledDirectories: [String] { watcher?.polledDirectories ?? [] }

    /// A barrier: returns once every file-system change made before the call has been
    /// seen and handled. A cookie file is created in the root; inotify reports events in
    /// order, so once its creation comes back, everything before it has too. Polled
    /// directories are looked at first, so their changes are handed over before the cookie.
    public func sync() async {
        await cookieBarrier()
        // A conflict seen before the barrier that waits for its file to settle is part of
        // what the barrier answers for: it answers once such conflicts are resolved, and
        // once what their resolution wrote (a conflict copy) has been seen in turn.
        guard settlingConflicts.values.contains(where: \.lookPending) else { return }
        await withCheckedContinuation { settleWaiters.append($0) }
        await cookieBarrier()
    }

    /// Answers once the watcher has handed over every report of what happened before the
    /// call (a file of its own made in the root, and its report waited for).
    func cookieBarrier() async {
        guard let watcher else { return }
        watcher.pollNow()
        let name = Self.syncCookiePrefix + CurrentProcess.randomAlphanumerics(12)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            syncWaiters[PathKey(name)] = continuation
            do {
                let fd = try FileDescriptor.open(root + "/" + name, .writeOnly, options: [.create, .exclusiveCreate])
                try? fd.close()
            } catch {
                syncWaiters.removeValue(forKey: PathKey(name))?.resume()
                return
            }
            // A root without a watch: the poll sees the cookie.
            if watcher.rootIsPolled { watcher.pollNow() }
        }
        try? FileManager.default.removeItem(atPath: root + "/" + name)
    }

    static let syncCookiePrefix = ".autosave-sync-"

    private func releaseSyncWaiters() {
        let waiters = syncWaiters
        syncWaiters = [:]
        for waiter in waiters.values { waiter.resume() }
    }

    func handle(_ batch: [WatchEvent]) {
        // A directory moved in or made is reported file by file: its ignore files are
        // read before any other file of the batch is opened, so that none is opened that
        // they ignore.
        if ignore.current.fileName != nil {
            var changed = false
            for event in batch {
                guard case .changed(let path) = event, entries.index(forKey: path) == nil, isRuleFile(path) else {
                    continue
                }
                changed = readIgnoreFile(in: PathName.parent(path)) || changed
            }
            // Applied once all are read: a directory moved in with ignore files at several
            // depths has none of its files opened that a deeper one ignores.
            if changed { ignoreRulesChanged() }
        }
        for event in batch {
            switch event {
            case .changed(let path):
                // Directories remembered missing that this report shows are there now.
                let made = missingDirectories.isEmpty ? [] : missingDirectories(atOrAbove: path)
                if !knownDirectories.isEmpty, !isStoreOwn(path) { noteInTheWay(path) }
                forgetMissingDirectories(atOrUnder: path)
                for directory in made { learnDirectory(directory) }
                if !syncWaiters.isEmpty, let waiter = syncWaiters.removeValue(forKey: PathKey(path)) {
                    waiter.resume()
                    continue
                }
                // The report of this store's own rename, its two halves read apart (a burst
                // of saves): compared with the disk below, and no longer waited for.
                if !ownRenames.isEmpty { ownRenames.removeValue(forKey: PathKey(path)) }
                // An open document is no temporary, no ignore file, and not ignored (a
                // change of the rules closes the documents it ignores): a change to one,
                // such as the rename that puts this store's own save in place, is compared
                // with the disk at once.
                if entries.index(forKey: path) == nil {
                    if path.hasPrefix(Self.syncCookiePrefix) || isTemporary(path) { continue }
                    if isRuleFile(path) {
                        ignoreFileChanged(in: PathName.parent(path))
                        continue
                    }
                    if isIgnored(path), !isInsideOpenPackage(path) {
                        ignoredPaths.insert(PathKey(path))
                        continue
                    }
                }
                let document = documentPath(for: path)
                if entries[document] == nil {
                    if !heldRenames.isEmpty, let source = heldRename(to: document) {
                        // The file of a document being saved, renamed meanwhile: looked at once it follows.
                        notePendingCheck(
                            source, member: document == path ? nil : Self.member(path, of: document))
                        continue
                    }
                    if !recentlyClosed.isEmpty, isClosedAsLeft(document, path: path) { continue }
                    openNew(document)
                } else if entries[document]!.savingToken != nil {
                    notePendingCheck(document, member: document == path ? nil : Self.member(path, of: document))
                } else {
                    checkExternalChange(
                        document, member: document == path ? nil : Self.member(path, of: document))
                }
            case .removed(let path):
                if path.hasPrefix(Self.syncCookiePrefix) || isTemporary(path) { continue }
                forgetDurableDirectories(atOrUnder: path)
                if !knownDirectories.isEmpty, !isStoreOwn(path) { forgetKnownDirectories(atOrUnder: path) }
                if isRuleFile(path) {
                    ignoreFileChanged(in: PathName.parent(path))
                    continue
                }
                // A directory removed or moved out of the root takes its ignore files' rules
                // along: a directory made later under its name starts without them.
                dropIgnoreFiles(atOrUnder: path)
                if ignoredPaths.remove(PathKey(path)) != nil || isIgnored(path), !isInsideOpenPackage(path) { continue }
                let document = documentPath(for: path)
                if document != path {
                    // A member removed by a save of this store is not seen as a change by another program.
                    if entries[document]?.savingToken != nil {
                        notePendingCheck(document, member: Self.member(path, of: document))
                    } else if entries[document] != nil {
                        checkExternalChange(document, member: Self.member(path, of: document))
                    } else if !heldRenames.isEmpty, let source = heldRename(to: document) {
                        notePendingCheck(source, member: Self.member(path, of: document))
                    }
                } else if entries[document] != nil {
                    removedExternally(document)
                } else {
                    // A directory: the documents that were inside it.
                    for inside in documents(under: path) { removedExternally(inside) }
                }
            case .renamed(let from, let to, let isDirectory):
                if isDirectory { forgetDurableDirectories(atOrUnder: from) }
                // A save's temporary put in place is reported as a change of its destination.
                if !knownDirectories.isEmpty, !isTemporary(from) {
                    forgetKnownDirectories(atOrUnder: from)
                    forgetKnownDirectories(atOrUnder: to)
                }
                forgetMissingDirectories(atOrUnder: to)
                renamedExternally(from: from, to: to, isDirectory: isDirectory)
            case .overflow:
                // Events were lost: compare every document with the disk, open what is new,
                // and release sync waiters whose cookie event may have been among the lost.
                watcher?.overflowHandled()
                forgetMissingDirectories()
                log.warning("the inotify queue overflowed; checking every document against the disk")
                rescan()
                overflows += 1
            case .rootGone:
                forgetMissingDirectories()
                let unsaved = entries.values.filter(\.isDirty).count
                log.error(
                    "the store root \(root) is gone (removed or moved away): \(entries.count) document(s) stay in memory, \(unsaved) with unsaved edits; saves wait until a directory is at \(root) again (autosaved does not make it)",
                    ["message_id": MessageID.externalChange, "path": root])
                releaseSyncWaiters()
            case .rootBack:
                forgetMissingDirectories()
                log.notice(
                    "the store root \(root) is back; watching it again and saving what is unsaved",
                    ["message_id": MessageID.externalChange, "path": root])
                // Saves that failed while it was gone are retried now, not at their backoff.
                for document in entries.keys where entries[document]!.isDirty && entries[document]!.retryAt != nil {
                    entries[document]!.retryAt = nil
                    if entries[document]!.failure != nil {
                        entries[document]!.forcedToken = entries[document]!.changeCount
                    }
                    schedule(document)
                }
                rescan()
            }
        }
    }

    /// A directory was removed or renamed (or may have been): which directories' entries
    /// are durable is found out again by the next save in each.
    private func forgetDurableDirectories(atOrUnder path: String? = nil) {
        durableDirectories.withLock { known in
            guard !known.isEmpty else { return }
            guard let path else { return known.removeAll() }
            known = known.filter { !PathName.isWithin($0.path, path) }
        }
    }

    /// Compares every open document with the disk and opens what is new.
    func rescan() {
        // A root gone (moved away, replaced, unmounted) is no reason to remove its
        // documents one by one: the watcher reports it, and they stay in memory until it
        // is back (a reload that restarts the watcher, an overflow, meet it here first).
        if let watcher, watcher.rootMissingSince != nil || watcher.rootIsGoneOrReplaced() { return }
        forgetDurableDirectories()
        for document in entries.keys {
            if (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + document)) == nil {
                removedExternally(document)
            } else if entries[document]?.savingToken != nil {
                pendingChecks.insert(PathKey(document))
            } else {
                checkExternalChange(document)
            }
        }
        // The ignore files are read again (on the way, when new files are opened): an
        // ignore file changed among the lost reports closes what it now ignores, and has
        // the watcher follow the rules.
        let before = ignore.current.files
        if configuration.openNewFiles {
            openAll()
        } else {
            var rules = ignore.current
            rules.readFiles(root: root, registry: registry)
            if rules.files != before { ignore.replace(rules) }
        }
        if ignore.current.files != before { ignoreRulesChanged() }
        releaseSyncWaiters()
    }

    /// Keeps what a closed document's file was when the store let it go, until the
    /// watcher has handed over every event from before the close.
    func rememberClosed(_ path: String, _ entry: Entry?) {
        guard let entry, watcher != nil else { return }
        closeGeneration += 1
        let generation = closeGeneration
        recentlyClosed[PathKey(path)] = ClosedDocument(
            fingerprint: entry.fingerprint, saved: entry.isPackage ? entry.existingFile : nil,
            isPackage: entry.isPackage, generation: generation)
        Task { [weak self] in
            guard let self else { return }
            await self.sync()
            await self.forgetClosed(path, generation: generation)
        }
    }

    private func forgetClosed(_ path: String, generation: Int) {
        if recentlyClosed[PathKey(path)]?.generation == generation { recentlyClosed[PathKey(path)] = nil }
    }

    /// Whether a change reported at `path` (the closed `document` or a member of it) found
    /// the file as the store left it at the close: an event of its own last save, or of
    /// the read that opened it, still on its way. A file found otherwise is another
    /// program's, and the memo of the close is dropped.
    private func isClosedAsLeft(_ document: String, path: String) -> Bool {
        guard let closed = recentlyClosed[PathKey(document)] else { return false }
        let full = root + "/" + document
        if let status = try? FileDescriptor.currentWorkingDirectory.status(of: full) {
            let member = document == path ? nil : Self.member(path, of: document)
            let unchanged =
                closed.isPackage
                ? packageUnchanged(full, member: member, saved: closed.saved, fingerprint: closed.fingerprint, status)
                : closed.fingerprint.map { Self.sameIdentity($0, status) } ?? false
            if unchanged { return true }
        }
        recentlyClosed[PathKey(document)] = nil
        return false
    }

    private func openNew(_ document: String) {
        guard configuration.openNewFiles else { return }
        do {
            try open(document)
            log.info("opened \(document), created by another program", ["document": document])
        } catch {
            log.debug("not opened: \(document): \(error)")
        }
    }

    /// Whether a component of `path` is one of the writer's temporary names.
    private func isTemporary(_ path: String) -> Bool { TemporaryName.isInside(path) }

    /// Whether `path` is a temporary name or the ignore rules keep it from being a document.
    private func isIgnored(_ path: String) -> Bool {
        if isTemporary(path) { return true }
        let isDirectory =
            (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + path))?.kind == .directory
        return ignore.ignoring(path, isDirectory: isDirectory) != nil
    }

    // MARK: Ignore rules

    /// Reads the ignore files in `directory` and every directory below it that the rules
    /// do not ignore, packages left out (a directory renamed inside the root); returns
    /// whether any rule changed.
    @discardableResult
    private func readIgnoreFiles(under directory: String) -> Bool {
        var rules = ignore.current
        guard rules.readFiles(under: directory, root: root, registry: registry) else {
            return false
        }
        ignore.replace(rules)
        return true
    }

    /// The ignore file in `directory` was written, replaced or removed: its patterns are read again.
    private func ignoreFileChanged(in directory: String) {
        if readIgnoreFile(in: directory) { ignoreRulesChanged() }
    }

    /// Whether `path` is an ignore file: its name, and not inside a package (a package's
    /// files are its members, whatever their names).
    private func isRuleFile(_ path: String) -> Bool {
        ignore.current.isIgnoreFile(PathName.lastComponent(path)) && documentPath(for: path) == path
    }

    /// Forgets the rules of the ignore files at or under the directory `path`, which is
    /// gone; returns whether there were any.
    @discardableResult
    private func dropIgnoreFiles(atOrUnder path: String) -> Bool {
        var rules = ignore.current
        guard !rules.files.isEmpty, rules.forgetFiles(atOrUnder: path) else { return false }
        ignore.replace(rules)
        return true
    }

    /// Reads the ignore file in `directory` again; returns whether its patterns changed
    /// (then the caller applies them: ``ignoreRulesChanged()``).
    private func readIgnoreFile(in directory: String) -> Bool {
        var rules = ignore.current
        let changed = rules.setFile(directory, rules.readFile(in: directory, root: root))
        guard changed else { return false }
        let file = directory.isEmpty ? rules.fileName ?? "" : directory + "/" + (rules.fileName ?? "")
        log.info(
            "the ignore file \(file) changed; \(rules.files[PathKey(directory)]?.count ?? 0) pattern(s) in it now",
            ["path": file])
        ignore.replace(rules)
        return true
    }

    /// Applies changed ignore rules: open documents that are now ignored are closed (their
    /// unsaved edits saved first), the watcher drops the directories now ignored and
    /// watches those no longer ignored, and files no longer ignored are opened.
    func ignoreRulesChanged() {
        forgetMissingDirectories()
        for (path, entry) in entries where ignore.ignoring(path, isDirectory: entry.isPackage) != nil {
            if entry.isDirty || entry.savingToken != nil {
                log.info("\(path) is now ignored; closing it once its unsaved edits are saved", ["document": path])
                Task { [weak self] in await self?.closeIgnored(path) }
            } else {
                remove(path)
                log.info("\(path) is now ignored; closed", ["document": path])
                emit(.closed(document: path))
            }
        }
        // What the old rules hid is looked at again; what the new ones hide is counted by the scan.
        ignoredPaths = []
        watcher?.ignoreRulesChanged()
        if configuration.openNewFiles { openAll(readingIgnoreFiles: false) }
    }

    /// Saves and forgets a document that became ignored: saved again while edits made
    /// during a save leave it unsaved, and after a failed save when the scheduler's retry
    /// (with its backoff) comes, until it is closed or the rules no longer ignore it. One
    /// such task a document, however often the rules change meanwhile.
    func closeIgnored(_ path: String) async {
        guard closingIgnored.insert(PathKey(path)).inserted else { return }
        defer { closingIgnored.remove(PathKey(path)) }
        while let entry = entries[path], ignore.ignoring(path, isDirectory: entry.isPackage) != nil {
            if !entry.isDirty {
                if entry.savingToken == nil {
                    remove(path)
                    log.info("\(path) is now ignored; closed", ["document": path])
                    emit(.closed(document: path))
                    return
                }
                // A save that has nothing left to cover is finishing.
                try? await Task.sleep(for: .milliseconds(10))
                continue
            }
            if entry.failure != nil, let retryAt = entry.retryAt {
                // A failed save: the scheduler tries again with its backoff, waited for here.
                let wait = max(retryAt.nanoseconds - Moment.now.nanoseconds, 10_000_000)
                try? await Task.sleep(for: .nanoseconds(wait))
                continue
            }
            do { try await save(path, wait: true) } catch {
                if entries[path]?.retryAt == nil { try? await Task.sleep(for: configuration.retryInterval) }
            }
        }
    }

    /// What the ignore rules are doing, for `status`.
    public var ignoreSummary: IgnoreSummary {
        let rules = ignore.current
        return IgnoreSummary(
            patterns: rules.all.count, files: rules.fileDirectories.sorted(), ignoredPaths: ignoredPaths.count)
    }

    /// The open documents inside the directory `path`.
    private func documents(under path: String) -> [String] {
        guard directoryUses[PathKey(path)] != nil else { return [] }
        let prefix = path + "/"
        return entries.keys.filter { PathName.starts($0, with: prefix) }.sorted()
    }

    /// The member path of `path` inside the package `document`, cut at the bytes: a name
    /// starting with a combining mark would otherwise join the `/` before it as one
    /// `Character`, and lose its first scalar.
    static func member(_ path: String, of document: String) -> String {
        String(Substring(path.utf8.dropFirst(document.utf8.count + 1)))
    }

    /// Whether `path` lies inside an open package: a member, whatever the ignore rules say
    /// of its name (they choose documents; a package holds every file inside it).
    private func isInsideOpenPackage(_ path: String) -> Bool {
        let document = documentPath(for: path)
        return document != path && entries.index(forKey: document) != nil
    }

    /// The document a path belongs to: the package directory it is inside, or itself.
    func documentPath(for path: String) -> String {
        let components = PathName.components(path)
        var prefix = ""
        for component in components.dropLast() {
            prefix = prefix.isEmpty ? component : prefix + "/" + component
            if registry.isPackage(component) { return prefix }
        }
        return path
    }

    // MARK: Removals

    /// Another program removed a document's file: by `[Conflicts] WhenRemoved=`, the
    /// document is written again from memory or closed.
    func removedExternally(_ document: String) {
        guard let entry = entries[document] else { return }
        // Renamed while its save runs (or onto the name of one that was): the file is
        // elsewhere, and the document follows it then.
        if !heldRenames.isEmpty, heldRenames[PathKey(document)] != nil { return }
        if !movesOntoHeld.isEmpty, movesOntoHeld.values.contains(where: { PathKey($0) == PathKey(document) }) { return }
        if (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + document)) != nil { return }
        let unsaved = entry.isDirty || entry.savingToken != nil
        let recreate: Bool =
            switch configuration.whenRemoved {
            case .recreateUnsaved: unsaved
            case .recreate: true
            case .close: false
            }
        if recreate {
            var lost: [String] = []
            if entry.isPackage, var package = entry.document as? PackageDocument {
                // Written whole: what is in memory, and nothing of what lived only on disk.
                lost = package.holdMembersForRecreation(saved: entry.existingFile)
                entries[document]!.document = package
            }
            if !lost.isEmpty {
                log.warning(
                    "\(document) was removed by another program with \(lost.count) member(s) whose bytes were only on disk; they are gone: \(lost.prefix(20).joined(separator: ", "))\(lost.count > 20 ? ", …" : "")",
                    ["document": document, "message_id": MessageID.externalChange])
            }
            if !entry.isDirty { entries[document]!.changeCount += 1 }
            entries[document]!.existingFile = nil
            entries[document]!.fingerprint = nil
            entries[document]!.forcedToken = entries[document]!.changeCount
            if entries[document]!.firstUnsavedEdit == nil { entries[document]!.firstUnsavedEdit = .now }
            // Its unsaved edits are protected until it is written again (a clean one, the
            // version last saved, is not journalled: a removed tree of them would all be
            // serialised at once here).
            if unsaved { journalRebase(&entries[document]!, path: document) }
            schedule(document)
            log.warning(
                "\(document) was removed by another program; writing it again from memory",
                ["document": document, "message_id": MessageID.externalChange])
            emit(.recreated(document: document))
        } else {
            remove(document)
            let lost = entry.changeCount - entry.savedChangeCount
            failWaiters(
                entry,
                .superseded(
                    document,
                    message:
                        "another program removed the file, and the document was closed with its unsaved edits (WhenRemoved=close)"
                ))
            if unsaved {
                log.warning(
                    "\(document) was removed by another program; closed with \(lost) unsaved edit(s) discarded (WhenRemoved=close)",
                    ["document": document, "message_id": MessageID.externalChange])
            } else {
                log.info(
                    "\(document) was removed by another program; closed",
                    ["document": document, "message_id": MessageID.externalChange])
            }
            emit(.closed(document: document))
        }
    }

    // MARK: Renames

    /// Another program renamed a file or directory inside the root (both halves of the
    /// rename seen). An open document follows its file to the new name, unsaved edits and
    /// all, as long as the new name means the same type; otherwise the old name counts as
    /// removed and the new one as changed.
    private func renamedExternally(from: String, to: String, isDirectory: Bool) {
        if !ownRenames.isEmpty, let temporary = ownRenames[PathKey(to)],
            PathKey(PathName.lastComponent(from)) == PathKey(temporary),
            PathKey(PathName.parent(from)) == PathKey(PathName.parent(to))
        {
            // The store's own save put its temporary in place: its fingerprint is recorded.
            ownRenames.removeValue(forKey: PathKey(to))
            return
        }
        // An ignore file renamed into place (an editor's or `sed -i`'s save), moved away,
        // or renamed to another name: the rules of each directory involved are read again,
        // and whatever else the rename made or took away is handled as such.
        let fromIsIgnoreFile = isRuleFile(from)
        let toIsIgnoreFile = isRuleFile(to)
        if fromIsIgnoreFile || toIsIgnoreFile {
            if fromIsIgnoreFile { ignoreFileChanged(in: PathName.parent(from)) } else { handle([.removed(from)]) }
            if toIsIgnoreFile { ignoreFileChanged(in: PathName.parent(to)) } else { handle([.changed(to)]) }
            return
        }
        let ignoredFrom = ignoredPaths.remove(PathKey(from)) != nil || isIgnored(from)
        if ignoredFrom, isDirectory, documentPath(for: to) == to, !registry.isPackage(PathName.lastComponent(to)),
            !isIgnored(to)
        {
            // A plain directory out of an ignored name: what it holds is new to the store,
            // its ignore files included, and the watcher watches it now.
            readIgnoreFiles(under: to)
            ignoreRulesChanged()
            return
        }
        // (A package's members are members whatever the rules say of their names.)
        if from.hasPrefix(Self.syncCookiePrefix) || isTemporary(from) || (ignoredFrom && !isInsideOpenPackage(from)) {
            handle([.changed(to)])  // a temporary file renamed into place: a save by someone
            return
        }
        if isIgnored(to), !isInsideOpenPackage(to) {
            handle([.removed(from)])
            ignoredPaths.insert(PathKey(to))
            return
        }
        // The file of a document being saved, renamed again (or a directory holding it).
        if !heldRenames.isEmpty, renameHeld(from: from, to: to) { return }
        let fromDocument = documentPath(for: from)
        let toDocument = documentPath(for: to)
        if fromDocument != from || toDocument != to {
            // Members of packages moving: changes to the packages involved.
            handle([.removed(from), .changed(to)])
            return
        }
        if isDirectory && entries[from] == nil {
            // A plain directory: the documents inside follow it, unless it became a
            // package, which is one new document.
            if registry.isPackage(PathName.lastComponent(to)) {
                for document in documents(under: from) { handle([.removed(document)]) }
                openNew(to)
            } else {
                for document in documents(under: from) {
                    let moved = to + document.dropFirst(from.count)
                    move(document, to: moved)
                    // (Not one held until its save is done: its follow looks.)
                    if entries.index(forKey: document) == nil { checkExternalChange(moved) }
                }
                // The ignore files inside went with the directory: the rules kept for the old
                // names are dropped and the files are read under the new ones.
                let changed = dropIgnoreFiles(atOrUnder: from)
                // Rules that already were may ignore the documents under their new names too.
                let movedIgnored = documents(under: to).contains { path in
                    ignore.ignoring(path, isDirectory: entries[path]?.isPackage ?? false) != nil
                }
                if readIgnoreFiles(under: to) || changed || movedIgnored {
                    log.info("the directory \(from) is now \(to); the ignore rules are applied to it", ["path": to])
                    ignoreRulesChanged()
                } else if configuration.openNewFiles {
                    scan(directory: to)
                }
            }
            return
        }
        guard entries[from] != nil else {
            handle([.changed(to)])
            return
        }
        move(from, to: to)
        // A change just before the rename was handled (or is queued) under the old name,
        // where the file no longer is: compare what is now under the new name (once the
        // document is there: one held until a save is done is looked at when it follows).
        if entries.index(forKey: from) == nil { checkExternalChange(to) }
    }

    /// Moves the open document `from` to the name its file now has. Returns whether it
    /// did (or will, once a save is done); otherwise the old name counted as removed and
    /// the new one as changed.
    @discardableResult
    private func move(_ from: String, to: String) -> Bool {
        guard let entry = entries[from] else { return false }
        let name = PathName.lastComponent(to)
        let registration = registry.registration(forName: name, isDirectory: entry.isPackage)
        if entries.index(forKey: to) != nil, !heldRenames.isEmpty, heldRenames[PathKey(to)] != nil,
            entry.savingToken == nil, registration?.contentType == entry.contentType, movesOntoHeld[PathKey(to)] == nil
        {
            // Onto the name of a document whose own file went elsewhere during its save:
            // this one takes the name once that one has followed its file.
            movesOntoHeld[PathKey(to)] = from
            return true
        }
        guard entries[to] == nil, registration?.contentType == entry.contentType else {
            handle([.removed(from), .changed(to)])
            return false
        }
        if entry.savingToken != nil {
            // The save's end is for the old name (its result, the file it found, the
            // fingerprint it recorded): the document follows once it is done. A document
            // already held keeps where its file went first (a directory above renamed
            // since is applied to that by ``renameHeld(from:to:)``).
            if heldRenames[PathKey(from)] == nil { heldRenames[PathKey(from)] = to }
            return true
        }
        remove(from, keepingJournal: true)
        // What the last read or save recorded of each file is where the file is now.
        entry.existingFile?.fileWasMoved(from: root + "/" + from, to: root + "/" + to)
        insert(entry, at: to)
        entries[to]!.queuedAt = nil
        journalMoved(&entries[to]!, to: to)
        if entry.isDirty { schedule(to) }
        log.info(
            "\(from) was renamed to \(to) by another program; the document follows it",
            ["document": to, "old_document": from, "message_id": MessageID.externalChange])
        emit(.renamed(document: from, to: to))
        return true
    }

    /// The document being saved that another program renamed to `path`, if any.
    func heldRename(to path: String) -> String? {
        heldRenames.first { PathKey($0.value) == PathKey(path) }?.key.path
    }

    /// Notes a change reported at a held rename's new name, for the look that follows it.
    private func notePendingCheck(_ document: String, member: String?) {
        pendingChecks.insert(PathKey(document))
        if let member { pendingMemberChecks[PathKey(document), default: []].insert(PathKey(member)) }
    }

    /// Another program renamed `from` to `to`: the new names of held renames at or under
    /// `from` change with it (a file renamed back to the name its document has is only
    /// looked at once the save is done). Returns whether `from` was one of those files
    /// itself, so that nothing else is to be done for the rename.
    private func renameHeld(from: String, to: String) -> Bool {
        var wasHeld = false
        for (source, destination) in heldRenames
        where PathKey(destination) == PathKey(from) || PathName.starts(destination, with: from + "/") {
            wasHeld = wasHeld || PathKey(destination) == PathKey(from)
            let moved = to + destination.dropFirst(from.count)
            if PathKey(moved) == source {
                heldRenames.removeValue(forKey: source)
                pendingChecks.insert(source)
            } else {
                heldRenames[source] = moved
            }
        }
        return wasHeld
    }

    /// Follows a rename by another program that came while the document's save was being
    /// written (``heldRenames``), now that the save is done: by where a file is now.
    /// Returns the document's path after it, `nil` if it was closed.
    func followHeldRename(_ from: String, to: String) -> String? {
        defer { moveOntoFollowed(from) }
        let directory = FileDescriptor.currentWorkingDirectory
        let atFrom = try? directory.status(of: root + "/" + from)
        let atTo = try? directory.status(of: root + "/" + to)
        // Both names hold a file: the document's (the one its save put in place, or the one
        // it last read) tells which name it has — a swap puts another file at the old name.
        let mine = entries[from]?.fingerprint
        let isMine = { (status: FileStatus?) -> Bool in
            guard let status, let mine else { return false }
            return status.device == mine.device && status.inode == mine.inode
        }
        let fromThere = atFrom != nil && !(atTo != nil && !isMine(atFrom) && isMine(atTo))
        let toThere = atTo != nil
        switch (fromThere, toThere) {
        case (false, true):
            // Into a package, or under a name the rules ignore: as a move out of the root.
            if documentPath(for: to) != to || isIgnored(to) {
                removedExternally(from)
                handle([.changed(to)])
                return entries.index(forKey: from) != nil ? from : nil
            }
            // The file is under its new name: what the save wrote there (or the file it found
            // changed) is compared with it there.
            guard move(from, to: to), entries.index(forKey: to) != nil else {
                return entries.index(forKey: from) != nil ? from : nil
            }
            pendingChecks.remove(PathKey(from))
            pendingChecks.insert(PathKey(to))
            if let members = pendingMemberChecks.removeValue(forKey: PathKey(from)) {
                pendingMemberChecks[PathKey(to), default: []].formUnion(members)
            }
            // Another file at the old name (written after the rename, or swapped in) is one of its own.
            if atFrom != nil, movesOntoHeld[PathKey(from)] == nil { handle([.changed(from)]) }
            return to
        case (false, false):
            // Renamed, then removed: the removal's policy.
            removedExternally(from)
            return entries.index(forKey: from) != nil ? from : nil
        case (true, false):
            // The renamed file is gone, and a file is at the old name again.
            pendingChecks.insert(PathKey(from))
            return from
        case (true, true):
            // The save put its file at the old name after the other program's rename: the
            // document keeps its name, and the renamed file is a file of its own.
            pendingChecks.insert(PathKey(from))
            handle([.changed(to)])
            return from
        }
    }

    /// The held document at `name` has followed its file (or stayed): a document whose
    /// file was renamed onto `name` meanwhile moves there now, if the name is free.
    private func moveOntoFollowed(_ name: String) {
        guard !movesOntoHeld.isEmpty, let waiting = movesOntoHeld.removeValue(forKey: PathKey(name)) else { return }
        if entries.index(forKey: name) == nil {
            if move(waiting, to: name) { checkExternalChange(name) }
        } else {
            handle([.removed(waiting), .changed(name)])
        }
    }

    // MARK: Changes

    /// Compares a document's file with what this store last read or wrote, and acts on a difference.
    func checkExternalChange(_ document: String, member: String? = nil) {
        guard let entry = entries[document] else { return }
        let full = root + "/" + document
        guard let status = try? FileDescriptor.currentWorkingDirectory.status(of: full) else { return }
        if entry.isPackage {
            if packageUnchanged(full, member: member, saved: entry.existingFile, fingerprint: entry.fingerprint, status)
            {
                return
            }
        } else {
            // The file exactly as this store last read or wrote it (its own save, usually):
            // no need to read it. Any other program's write changes the change time at least.
            if let recorded = entry.fingerprint, Self.sameIdentity(recorded, status) { return }
            let bytes = FileContents.read(full)
            if bytes == nil {
                // Not read: if the file there is no longer the one looked at (gone, renamed on
                // and back, replaced), a report of that follows; only a file that stays as it
                // was and cannot be read counts as changed.
                guard let again = try? FileDescriptor.currentWorkingDirectory.status(of: full),
                    again.device == status.device, again.inode == status.inode, again.changed == status.changed
                else { return }
            }
            let now = Fingerprint(status, contents: bytes)
            if now == entry.fingerprint { return }
            if let recorded = entry.fingerprint, now.sameContents(as: recorded) {
                // The same bytes (a touch, a chmod, the same contents written again): nothing to
                // read or keep, but the next save must expect the file as it is now.
                entries[document]!.fingerprint = now
                return
            }
        }
        if !entry.isDirty && entry.savingToken == nil {
            reloadFromDisk(document, reason: "another program changed the file, and it was read again")
            return
        }
        if conflictWaitsToSettle(document, isPackage: entry.isPackage, resolves: false, member: member) { return }
        resolveConflict(document)
    }

    /// A save found the document's file not as this store last read or wrote it (see
    /// ``ExpectedDestination``) and replaced nothing: the change is handled as the
    /// watcher would have — the same bytes only update the fingerprint, other contents go
    /// through the `[Conflicts]` policy (the document is dirty: its save was due), a
    /// file that appeared where a new document was to be saved is a conflict too.
    func changeFoundBySave(_ document: String) {
        guard let entry = entries[document] else { return }
        let full = root + "/" + document
        guard (try? FileDescriptor.currentWorkingDirectory.status(of: full)) != nil else {
            // Removed since: the next save writes it again (WhenRemoved= applies once the watcher says so).
            entries[document]!.fingerprint = nil
            schedule(document)
            return
        }
        if entry.isPackage {
            // A save that started before the document was read again (a conflict resolved
            // meanwhile) has nothing of its own left to keep.
            guard entry.isDirty else { return }
            if !conflictWaitsToSettle(document, isPackage: true, resolves: true) { resolveConflict(document) }
            return
        }
        checkExternalChange(document)
        // Waiting for the other program to finish: the look that follows resolves it.
        if settlingConflicts[PathKey(document)]?.lookPending == true { return }
        if let after = entries[document], after.isDirty { schedule(document) }
    }

    /// Whether a regular file is exactly as `recorded`: the same inode, size, modification
    /// and change times.
    static func sameIdentity(_ recorded: Fingerprint, _ status: FileStatus) -> Bool {
        !recorded.isDirectory && recorded.device == status.device && recorded.inode == status.inode
            && recorded.size == status.size && recorded.modified == status.modified
            && recorded.changed == status.changed
    }

    /// Whether a change reported in the package at `full` (`member`, or the package
    /// itself) is this store's own: a member that still is what the saved wrapper
    /// recorded, one gone from disk and from what was last saved (the save removed it),
    /// or the package directory it last read or wrote.
    private func packageUnchanged(
        _ full: String, member: String?, saved: FileWrapper?, fingerprint: Fingerprint?, _ status: FileStatus
    ) -> Bool {
        if let member {
            if let wrapper = memberWrapper(saved, member) {
                return wrapper.matchesContents(of: URL(fileURLWithPath: full + "/" + member))
            }
            return (try? FileDescriptor.currentWorkingDirectory.status(of: full + "/" + member)) == nil
        }
        return fingerprint.map { $0.inode == status.inode } ?? false
    }

    private func memberWrapper(_ package: FileWrapper?, _ member: String) -> FileWrapper? {
        var node = package
        for name in PathName.components(member) { node = node?.fileWrappers?[name] }
        return node
    }

    @discardableResult
    private func reloadFromDisk(_ document: String, reason: @autoclosure () -> String) -> Bool {
        do {
            try reread(document, reason: reason())
            externalReloads += 1
            log.info(
                "\(document) was changed by another program; read again",
                ["document": document, "message_id": MessageID.externalChange])
            emit(.changedOnDisk(document: document))
            return true
        } catch {
            log.warning(
                "\(document) was changed by another program but cannot be read: \(error)", ["document": document])
            return false
        }
    }

    /// Another program changed the file of a document with unsaved edits. Both versions
    /// are kept: by `[Conflicts] Keep=`, the other program's file stays and the edits are
    /// written beside it as `<name> (conflict <time>).<ext>` (`disk`, the default), or the
    /// edits are saved under the name and the other program's version is copied beside it
    /// (`memory`). For a package, the edited members are laid over the other program's
    /// version: that is the edits' copy.
    func resolveConflict(_ document: String) {
        guard let entry = entries[document] else { return }
        let full = root + "/" + document
        let copy = conflictCopyName(document)
        let keep = configuration.conflictKeep
        // With Keep=memory, a package's next save lays the edits over their version in place:
        // read before anything is written, so that the conflict is resolved only with it.
        var inPlace: FileWrapper?
        do {
            let theirs = try FileWrapper(url: URL(fileURLWithPath: full), options: .immediate, beneath: root)
            switch keep {
            case .disk:
                let mine = try entry.document.fileWrapper(
                    configuration: .init(contentType: entry.contentType, existingFile: entry.isPackage ? theirs : nil))
                try writer.write(mine, to: root + "/" + copy)
            case .memory:
                if entry.isPackage { inPlace = try FileWrapper(url: URL(fileURLWithPath: full), beneath: root) }
                try writer.write(theirs, to: root + "/" + copy)
            }
        } catch {
            log.error(
                "\(document) changed on disk while it has unsaved edits, and the conflict copy \(copy) could not be written: \(error); the edits stay in memory",
                ["document": document, "message_id": MessageID.conflict])
            // The edits cannot reach the disk for now: a failed save, retried after its
            // backoff (every attempt would find the file changed and the copy failing).
            if let index = entries.index(forKey: document) {
                recordSaveFailure(document, at: index, error, through: entry.changeCount)
            }
            return
        }
        conflicts += 1
        switch keep {
        case .disk:
            log.warning(
                "\(document) was changed by another program while it had unsaved edits: the file keeps their version, the edits were saved as \(copy)",
                ["document": document, "conflict_copy": copy, "message_id": MessageID.conflict])
            let reloaded = reloadFromDisk(
                document,
                reason: "another program changed the file; the edits were saved as \(copy), the file keeps its version")
            // (A file of the kind the document is, which every save would find changed; a
            // directory in a file's way, say, fails the saves instead, with their backoff.)
            if !reloaded, let left = entries[document],
                let kind = try? FileDescriptor.currentWorkingDirectory.status(of: full).kind,
                kind == (left.isPackage ? .directory : .regular)
            {
                // Their version is no document this store can read (say, JSON cut short): the
                // edits are in the copy, and the document is closed rather than left dirty,
                // whose every save would find the file changed again and write another copy.
                remove(document)
                failWaiters(
                    left,
                    .superseded(
                        document,
                        message:
                            "another program changed the file to something that cannot be read; the edits were saved as \(copy), and the document was closed"
                    ))
                log.warning(
                    "\(document) cannot be read as the other program left it; the edits are in \(copy), and the document was closed",
                    ["document": document, "conflict_copy": copy, "message_id": MessageID.conflict])
                emit(.conflict(document: document, copy: copy, copyHolds: .memory))
                emit(.closed(document: document))
                return
            }
        case .memory:
            log.warning(
                "\(document) was changed by another program while it had unsaved edits: their version was copied to \(copy), the edits are saved under \(document)",
                ["document": document, "conflict_copy": copy, "message_id": MessageID.conflict])
            // The next save lays the edits over the file as it is now (members in place for a package).
            entries[document]!.existingFile = inPlace
            if let status = try? FileDescriptor.currentWorkingDirectory.status(of: full) {
                let bytes = entry.isPackage ? nil : FileContents.read(full)
                entries[document]!.fingerprint = Fingerprint(status, contents: bytes)
            }
            entries[document]!.forcedToken = entries[document]!.changeCount
            journalRebase(&entries[document]!, path: document)
            schedule(document)
        }
        emit(.conflict(document: document, copy: copy, copyHolds: keep == .disk ? .memory : .disk))
    }

    /// `<dir>/<base> (conflict <UTC time>).<ext>`, made unique with a counter.
    private func conflictCopyName(_ document: String) -> String {
        let directory = PathName.parent(document)
        let name = PathName.lastComponent(document)
        let (base, ext) = PathName.splitExtension(name)
        var stamp = ISO8601DateFormatter().string(from: Date()).replacingOccurrences(of: ":", with: "-")
        stamp = stamp.replacingOccurrences(of: "Z", with: "")
        var counter = 1
        while true {
            let suffix = counter == 1 ? "" : " \(counter)"
            let copyName = "\(base) (conflict \(stamp)\(suffix))" + (ext.isEmpty ? "" : ".\(ext)")
            let copy = directory.isEmpty ? copyName : directory + "/" + copyName
            if entries[copy] == nil,
                (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + copy, followSymlinks: false))
                    == nil
            {
                return copy
            }
            counter += 1
        }
    }
}

/// Kicks the watcher's thread when the store's loop finds the inotify descriptor readable.
private final class WatcherKicker: ReadinessHandler {
    let watcher: FileWatcher
    init(_ watcher: FileWatcher) { self.watcher = watcher }
    func readable(peerClosed: Bool, ahead: ReadAhead?) { watcher.kick() }
    func claimReadAhead() -> Int32? { nil }
    func loopStopped() {}
}
