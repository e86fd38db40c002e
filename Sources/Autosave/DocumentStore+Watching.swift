import Documents
import Foundation
import Logging
import Posix

extension DocumentStore {
    /// Starts watching the root with inotify. Changes by other programs are handled as
    /// they come: a document without unsaved edits is read again; one with unsaved edits
    /// keeps the other program's file and gets its edits saved beside it as a conflict
    /// copy; a removed document with unsaved edits is written again, one without is
    /// closed; a new file is opened. The store's own saves are recognised by the
    /// fingerprint they recorded and ignored.
    public func startWatching() throws {
        guard watcher == nil else { return }
        let (stream, continuation) = AsyncStream<[WatchEvent]>.makeStream()
        let log = log
        watcher = try FileWatcher(
            root: root, log: { log.error($0, ["message_id": MessageID.watchLimit]) },
            deliver: { batch in continuation.yield(batch) })
        Task { [weak self] in
            for await batch in stream {
                guard let self else { return }
                await self.handle(batch)
            }
        }
    }

    public func stopWatching() {
        watcher?.stop()
        watcher = nil
    }

    /// Counters of what the watcher caused: reloads of documents changed by other programs, and conflicts.
    public var watchCounters: (reloads: Int, conflicts: Int, overflows: Int) { (externalReloads, conflicts, overflows) }

    /// A barrier: returns once every file-system change made before the call has been
    /// seen and handled. A cookie file is created in the root; inotify reports events in
    /// order, so once its creation comes back, everything before it has too.
    public func sync() async {
        guard watcher != nil else { return }
        let name = Self.syncCookiePrefix + CurrentProcess.randomAlphanumerics(12)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            syncWaiters[name] = continuation
            do {
                let fd = try FileDescriptor.open(root + "/" + name, .writeOnly, options: [.create, .exclusiveCreate])
                try? fd.close()
            } catch {
                syncWaiters.removeValue(forKey: name)?.resume()
            }
        }
        try? FileManager.default.removeItem(atPath: root + "/" + name)
    }

    static let syncCookiePrefix = ".autosave-sync-"

    func handle(_ batch: [WatchEvent]) {
        for event in batch {
            switch event {
            case .changed(let path):
                if let waiter = syncWaiters.removeValue(forKey: path) {
                    waiter.resume()
                    continue
                }
                if path.hasPrefix(Self.syncCookiePrefix) || isIgnored(path) { continue }
                let document = documentPath(for: path)
                if entries[document] == nil {
                    do {
                        try open(document)
                        log.info("opened \(document), created by another program", ["document": document])
                    } catch {
                        log.debug("not opened: \(document): \(error)")
                    }
                } else if entries[document]!.savingToken != nil {
                    pendingChecks.insert(document)
                } else {
                    checkExternalChange(
                        document, member: document == path ? nil : String(path.dropFirst(document.count + 1)))
                }
            case .removed(let path):
                if path.hasPrefix(Self.syncCookiePrefix) || isIgnored(path) { continue }
                let document = documentPath(for: path)
                guard let entry = entries[document] else { continue }
                if document != path {
                    checkExternalChange(document, member: String(path.dropFirst(document.count + 1)))
                    continue
                }
                if (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + document)) != nil { continue }
                if entry.isDirty || entry.savingToken != nil {
                    // The edits exist only in memory now: write them again at once.
                    entries[document]!.existingFile = nil
                    entries[document]!.fingerprint = nil
                    entries[document]!.forcedToken = entry.changeCount
                    schedule(document)
                    log.warning(
                        "\(document) was removed by another program; writing its unsaved edits again",
                        ["document": document, "message_id": MessageID.externalChange])
                    emit(.recreated(document: document))
                } else {
                    entries[document] = nil
                    log.info(
                        "\(document) was removed by another program; closed",
                        ["document": document, "message_id": MessageID.externalChange])
                    emit(.closed(document: document))
                }
            case .overflow:
                // Events were lost: compare every document with the disk, open what is new,
                // and release sync waiters whose cookie event may have been among the lost.
                watcher?.overflowHandled()
                log.warning("the inotify queue overflowed; checking every document against the disk")
                for document in entries.keys {
                    if (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + document)) == nil {
                        handle([.removed(document)])
                    } else if entries[document]?.savingToken != nil {
                        pendingChecks.insert(document)
                    } else {
                        checkExternalChange(document)
                    }
                }
                openAll()
                overflows += 1
                let waiters = syncWaiters
                syncWaiters = [:]
                for waiter in waiters.values { waiter.resume() }
            case .rootGone:
                log.error(
                    "the store root \(root) was removed or moved; documents stay in memory",
                    ["message_id": MessageID.externalChange])
            }
        }
    }

    private func isIgnored(_ path: String) -> Bool {
        path.split(separator: "/").contains { TemporaryName.isTemporary(String($0)) }
    }

    /// The document a path belongs to: the package directory it is inside, or itself.
    func documentPath(for path: String) -> String {
        let components = path.split(separator: "/").map(String.init)
        var prefix = ""
        for component in components.dropLast() {
            prefix = prefix.isEmpty ? component : prefix + "/" + component
            if registry.isPackage(component) { return prefix }
        }
        return path
    }

    /// Compares a document's file with what this store last read or wrote, and acts on a difference.
    func checkExternalChange(_ document: String, member: String? = nil) {
        guard let entry = entries[document] else { return }
        let full = root + "/" + document
        guard let status = try? FileDescriptor.currentWorkingDirectory.status(of: full) else { return }
        if entry.isPackage {
            // Packages: a member that still is what the saved wrapper recorded is our own write.
            if let member, let wrapper = memberWrapper(entry.existingFile, member),
                wrapper.matchesContents(of: URL(fileURLWithPath: full + "/" + member))
            {
                return
            }
            if member == nil, let fingerprint = entry.fingerprint, fingerprint.inode == status.inode { return }
        } else {
            let bytes = try? Data(contentsOf: URL(fileURLWithPath: full))
            if Fingerprint(status, contents: bytes) == entry.fingerprint { return }
        }
        if !entry.isDirty && entry.savingToken == nil {
            reloadFromDisk(document)
            return
        }
        guard !entry.isPackage else {
            log.warning(
                "\(document) changed on disk while it has unsaved edits; the next save replaces the changed members",
                ["document": document, "message_id": MessageID.conflict])
            return
        }
        saveConflictCopy(document)
    }

    private func memberWrapper(_ package: FileWrapper?, _ member: String) -> FileWrapper? {
        var node = package
        for name in member.split(separator: "/") { node = node?.fileWrappers?[String(name)] }
        return node
    }

    private func reloadFromDisk(_ document: String) {
        do {
            try reread(document)
            externalReloads += 1
            log.info(
                "\(document) was changed by another program; read again",
                ["document": document, "message_id": MessageID.externalChange])
            emit(.changedOnDisk(document: document))
        } catch {
            log.warning(
                "\(document) was changed by another program but cannot be read: \(error)", ["document": document])
        }
    }

    /// The other program's file stays; the unsaved edits are written beside it as
    /// `<name> (conflict <time>).<ext>`, and the document becomes the file on disk.
    private func saveConflictCopy(_ document: String) {
        guard let entry = entries[document] else { return }
        let directory = (document as NSString).deletingLastPathComponent
        let name = (document as NSString).lastPathComponent
        let base = (name as NSString).deletingPathExtension
        let ext = (name as NSString).pathExtension
        var stamp = ISO8601DateFormatter().string(from: Date()).replacingOccurrences(of: ":", with: "-")
        stamp = stamp.replacingOccurrences(of: "Z", with: "")
        let copyName = "\(base) (conflict \(stamp))" + (ext.isEmpty ? "" : ".\(ext)")
        let copy = directory.isEmpty ? copyName : directory + "/" + copyName
        do {
            let wrapper = try entry.document.fileWrapper(
                configuration: .init(contentType: entry.contentType, existingFile: nil))
            try writer.write(wrapper, to: root + "/" + copy)
        } catch {
            log.error(
                "\(document) changed on disk while it has unsaved edits, and the conflict copy could not be written: \(error); the edits stay in memory",
                ["document": document, "message_id": MessageID.conflict])
            return
        }
        conflicts += 1
        log.warning(
            "\(document) was changed by another program while it had unsaved edits: the file keeps their version, the edits were saved as \(copy)",
            ["document": document, "conflict_copy": copy, "message_id": MessageID.conflict])
        reloadFromDisk(document)
        emit(.conflict(document: document, copy: copy))
    }
}
