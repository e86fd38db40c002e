import Dispatch
import Documents
import Foundation
import Journal
import Logging
import Posix
import Synchronization

/// What the last start-up replayed from the journal (for the log, `STATUS=` and `status`).
public struct JournalReplaySummary: Sendable, Equatable {
    /// Edits replayed: applied again, or superseded by a later edit that gives the whole
    /// document and was applied (the document holds what they led to).
    public var edits = 0
    /// Documents they changed (or created).
    public var documents = 0
    /// Documents whose file another program changed while the daemon was down: their
    /// edits went to a conflict copy (or, by `[Conflicts] Keep=memory`, the file's version did).
    public var conflicts: [String] = []
    /// Documents whose file (or package directory) another program removed while the
    /// daemon was down, written again from their journalled edits by `[Conflicts]
    /// WhenRemoved=` (with `close`, their edits are discarded: named in ``unapplied``).
    public var recreated: [String] = []
    /// Documents whose journalled edits could not be applied, each with why.
    public var unapplied: [String] = []
    /// What the journal itself found: torn tails cut off, damaged records, missing segments.
    public var problems: [String] = []
    /// Records read, and how long the whole replay took.
    public var records = 0
    public var duration: Duration = .zero

    public var message: String {
        let ms =
            Double(duration.components.attoseconds / 1_000_000_000_000) / 1000
            + Double(duration.components.seconds) * 1000
        var text =
            "replayed \(edits) edit\(edits == 1 ? "" : "s") to \(documents) document\(documents == 1 ? "" : "s") from the journal in \(String(format: "%.1f", ms)) ms"
        if !conflicts.isEmpty {
            text += "; \(conflicts.count) changed while the daemon was down (conflict copies kept)"
        }
        if !recreated.isEmpty {
            text += "; \(recreated.count) removed while the daemon was down (written again from the journal)"
        }
        if !unapplied.isEmpty { text += "; \(unapplied.count) could not be replayed" }
        if !problems.isEmpty { text += "; journal problems: \(problems.joined(separator: "; "))" }
        return text
    }
}

/// The journal's figures for `status` and the metrics.
public struct JournalSummary: Sendable, Equatable {
    public var mode: String
    public var directory: String
    public var bytes: Int
    public var segments: Int
    /// Obsolete segments kept to be reused (docs/JOURNAL.md, "Recycled segments").
    public var spareSegments: Int
    /// Memory the journal holds for its records (see ``JournalStatistics/memoryBytes``).
    public var memoryBytes: Int
    /// Records not yet covered by a durable save.
    public var unsavedRecords: Int
    public var writtenThrough: UInt64
    public var durableThrough: UInt64
    public var syncs: Int
    public var lastSyncAgo: Duration?
    public var failure: String?
    /// Edits made through `modify(_:as:_:)`, which the journal cannot hold (their documents
    /// are protected again from their next save on), and the document types they were made to.
    public var unjournalledEdits: Int
    public var unjournalledTypes: [String]
    public var lastReplay: JournalReplaySummary?
}

/// Opening, writing, truncating and replaying the edit journal (`[Journal]`; see
/// `docs/JOURNAL.md`). Every edit the store applies — from the socket or from an
/// embedder's ``apply(_:to:create:)`` — is appended as a ``JournalEntry`` of its
/// document, on the store's thread, with no system call; the loop writes the pass's
/// records with one `write(2)` right before it writes the pass's replies
/// (``EventLoop/beforeReplies``). A durable save releases the records it covers.
extension DocumentStore {
    // MARK: Opening and replay

    /// Opens the journal in `[Journal] Directory=` and replays what it holds onto the
    /// documents read from disk (call after ``openAll()``, before serving): each
    /// document's edits are applied again through the documents' own edit code, on top
    /// of the version they were made to; a file another program changed meanwhile goes
    /// through the `[Conflicts]` policy. The replayed documents are saved at once. With
    /// `Mode=off`, returns `nil` unless the directory holds a journal a run with it on
    /// left: its edits were acknowledged, and are replayed all the same (the caller saves
    /// them and closes the journal before serving; see ``Daemon``).
    ///
    /// The journal's directory names the store root its records are of (its label): a
    /// journal holding records of another root (`Root=` changed while some were not
    /// saved) is not replayed here — ``JournalOfAnotherRoot`` is thrown, the journal left
    /// as it is.
    @discardableResult
    public func openJournal() throws -> JournalReplaySummary? {
        guard journal == nil else { return nil }
        if configuration.journalMode == .off, !Journal.hasSegments(in: configuration.journalDirectory) { return nil }
        let started = ContinuousClock.now
        let mode: JournalOptions.SyncMode =
            configuration.journalMode == .always ? .always : .periodic(configuration.journalSyncInterval)
        let gate = replyGate
        let log = log
        let segmentSize = min(16 << 20, max(256 << 10, configuration.journalMaxSize / 8))
        let journal = try Journal(
            directory: configuration.journalDirectory,
            // Segments small beside MaxSize=, so that saving the documents that pin the oldest frees space.
            options: JournalOptions(
                mode: mode, segmentSize: segmentSize,
                maxPayloadSize: configuration.journalRecordLimit,
                // Obsolete segments are kept for reuse: two, and more within MaxSize=.
                recycleWithin: configuration.journalMaxSize, io: journalIO),
            onDurable: { lsn in gate.advance(durable: lsn.rawValue) },
            onFailure: { failure in
                gate.lastFailure.withLock { $0 = failure.description }
                log.error(
                    "the edit journal failed: \(failure); edits stay in memory and the journal writes them again",
                    ["path": failure.path, "errno_name": failure.errno.name, "message_id": MessageID.journalFailed])
            })
        // The records are read into one array, each edit kept as its bytes (a slice of its
        // segment, undecoded until it is applied), and grouped by document afterwards.
        var chains = Chains()
        let report: JournalReplayReport
        do {
            report = try journal.replay { record in
                let at = chains.add(record)
                // Pinned until the documents are saved; owners with nothing left to apply are released below.
                journal.noteReplayed(owner: record.owner, lsn: record.lsn, log: &chains.list[at].log)
            }
        } catch let error as JournalFailure {
            journal.close()
            throw error
        } catch {
            journal.close()
            throw JournalFailure(.open, path: configuration.journalDirectory, errno: .ioError)
        }
        let label: JournalRootLabel
        do {
            label = try checkJournalRoot(journal, records: chains.count)
        } catch {
            journal.close()
            throw error
        }
        self.journal = journal
        replyNeedsSync = configuration.journalMode == .always
        gate.advance(written: report.lastLSN?.rawValue ?? 0, durable: report.lastLSN?.rawValue ?? 0)
        loop.beforeReplies = { [weak self] in self?.isolatedHere { $0.writeJournal() } ?? nil }
        let replayed = chains.count
        var summary = replay(chains, report: report)
        if replayed > 0 { renewJournalIdentity(journal, label: label) }
        summary.duration = ContinuousClock.now - started
        lastReplay = summary
        return summary
    }

    /// Compares the store root the journal's label names with this one; rewrites the
    /// label when it differs and the journal holds no records. The same root: the same
    /// path, or the same directory by device and inode (a root moved, and `Root=` with it).
    ///
    /// Sets ``journalIdentity``: the label's while records are left (the files their saves
    /// marked name it, for the replay to come: see ``renewJournalIdentity(_:label:)``), a
    /// new one otherwise. Returns the label as it is now.
    private func checkJournalRoot(_ journal: Journal, records: Int) throws -> JournalRootLabel {
        let status = try? FileDescriptor.currentWorkingDirectory.status(of: root, followSymlinks: true)
        var here = JournalRootLabel(
            identity: UInt64.random(in: 1...UInt64.max), path: root, device: status?.device ?? 0,
            inode: status?.inode ?? 0)
        let recorded = try journal.readLabel().flatMap(JournalRootLabel.init(parsing:))
        defer { journalIdentity = here.identity }
        // Paths by their bytes, as the kernel names directories (Swift's `==` takes two
        // normalizations of one name for one).
        if let recorded,
            recorded.path.utf8.elementsEqual(here.path.utf8)
                || (recorded.device == here.device && recorded.inode == here.inode)
        {
            if records > 0, recorded.identity != 0 { here.identity = recorded.identity }
            if !recorded.text.utf8.elementsEqual(here.text.utf8) { try journal.writeLabel(here.text) }
            return here
        }
        if let recorded, records > 0 {
            throw JournalOfAnotherRoot(
                directory: journal.directory, recordedRoot: recorded.path, root: root, records: records)
        }
        // No label (a journal written before roots were recorded is taken as this root's), or
        // nothing left of the other root's.
        try journal.writeLabel(here.text)
        return here
    }

    /// After a replay, a new identity for this run's marks: owner numbers and LSNs may
    /// repeat from one run to the next (LSNs a power cut took are given again, and the
    /// numbers of owners whose records are gone), so a mark is believed only within the
    /// run that wrote it — and at the replay right after, under the label it was written
    /// with. The `saving` records that replay journalled for the marks it believed are
    /// made durable first: no later replay needs a mark of the old identity. Should that
    /// sync or the label's write fail, the old identity stays (logged).
    private func renewJournalIdentity(_ journal: Journal, label: JournalRootLabel) {
        let last = journal.flush()
        let synced = DispatchSemaphore(value: 0)
        let failure = Mutex<JournalFailure?>(nil)
        journal.requestSync(through: last)
        journal.whenDurable(last) { error in
            failure.withLock { $0 = error }
            synced.signal()
        }
        var renewed = label
        renewed.identity = UInt64.random(in: 1...UInt64.max)
        do {
            guard synced.wait(timeout: .now() + 10) == .success else {
                throw JournalFailure(.fdatasync, path: journal.directory, errno: .ioError)
            }
            if let error = failure.withLock({ $0 }) { throw error }
            try journal.writeLabel(renewed.text)
            journalIdentity = renewed.identity
        } catch {
            log.warning(
                "the edit journal keeps its identity from the last run (\(error)): its files' marks stay believed",
                ["message_id": MessageID.journalFailed, "path": journal.directory])
        }
    }

    /// One record of a document's chain as replay first reads it. An edit stays undecoded
    /// (its payload, a slice of the segment read) until it is applied; any other record is
    /// decoded at once, into ``Chain/markers``.
    private struct ChainRecord {
        var lsn: LSN
        /// An edit's change count; 0 for the other records.
        var token: UInt64
        /// An edit's command (see ``JournalEntry/peek(_:)``); `nil` for the other records.
        var command: EditCommand?
        var payload: ArraySlice<UInt8>

        var isEdit: Bool { command != nil }

        /// The edit, decoded.
        func edit() throws(JournalEntry.DecodingError) -> DocumentEdit {
            guard case .edit(_, let edit) = try JournalEntry(decoding: payload) else {
                throw JournalEntry.DecodingError(description: "record \(lsn) is not an edit")
            }
            return edit
        }
    }

    /// One document's records (their indices in ``Chains/records``) and what the records that
    /// are not edits say.
    private struct Chain {
        var owner: UInt64
        /// Its records as the journal counts them: the entry's ``Entry/journalLog`` once replayed.
        var log = JournalOwnerLog()
        var path = ""
        /// Its records' indices in ``Chains/records``, in order (once ``Chains/group()`` has run).
        var members: ArraySlice<Int> = []
        /// The records that are not edits (bases, saves, moves), decoded, with their index
        /// in ``Chains/records``.
        var markers: [(index: Int, entry: JournalEntry)] = []
        var undecodable: String?
        /// Its last record's LSN, decodable or not: what its release must reach.
        var lastLSN = LSN.zero
    }

    /// The chains of every document the journal holds records of, in the order of their
    /// first records. The records are kept in one array in the order read, and grouped by
    /// document once all are read: appended to a list per document as they come (the
    /// documents' records interleave), each record would touch another document's list,
    /// and with thousands of documents nearly every such touch misses the cache.
    private struct Chains {
        var list: [Chain] = []
        /// Each owner's chain: its number is the chain's index in `list`.
        var numbering = DenseNumbering<UInt64>()
        var records: [ChainRecord] = []
        /// For each record, its chain's index in `list`.
        private var chainOf: [Int32] = []
        var highestOwner: UInt64?
        /// Every record delivered, those of undecodable chains included.
        private(set) var count = 0

        /// Adds a record to its chain; returns the chain's index in `list`.
        mutating func add(_ record: JournalRecord) -> Int {
            count += 1
            highestOwner = max(highestOwner ?? 0, record.owner)
            let at = Int(numbering.number(of: record.owner))
            if at == list.count { list.append(Chain(owner: record.owner)) }
            list[at].lastLSN = record.lsn
            guard list[at].undecodable == nil else { return at }
            do {
                switch try JournalEntry.peek(record.payload) {
                case .edit(let token, let command):
                    records.append(
                        ChainRecord(lsn: record.lsn, token: token, command: command, payload: record.payload))
                case .other(let entry):
                    switch entry {
                    case .base(let path, _, _, _), .saving(let path, _, _), .moved(let path):
                        list[at].path = path
                    case .edit, .memberBefore, .skipped: break
                    }
                    list[at].markers.append((records.count, entry))
                    let none = record.payload.startIndex..<record.payload.startIndex
                    records.append(ChainRecord(lsn: record.lsn, token: 0, command: nil, payload: record.payload[none]))
                }
                chainOf.append(Int32(at))
            } catch {
                list[at].undecodable = "record \(record.lsn) cannot be read: \(error)"
            }
            return at
        }

        /// Groups the records by chain (``Grouping``: each chain's in the order read).
        mutating func group() {
            let grouping = Grouping(slots: chainOf, slotCount: list.count)
            for at in list.indices { list[at].members = grouping.group(at) }
            chainOf = []
        }
    }

    private func replay(_ chains: consuming Chains, report: JournalReplayReport) -> JournalReplaySummary {
        chains.group()
        var summary = JournalReplaySummary()
        summary.records = chains.count
        if let highest = chains.highestOwner { nextJournalOwner = max(nextJournalOwner, highest &+ 1) }
        for problem in report.problems {
            var text = problem.description
            if case .badRecord(_, let owners) = problem.kind, !owners.isEmpty {
                let names = owners.map { owner in
                    chains.numbering.existingNumber(of: owner).map { chains.list[Int($0)].path } ?? "document \(owner)"
                }
                text += " (documents affected: \(names.joined(separator: ", ")))"
            }
            summary.problems.append(text)
        }
        for var chain in chains.list {
            let owner = chain.owner
            if let undecodable = chain.undecodable {
                summary.unapplied.append("\(chain.path.isEmpty ? "document \(owner)" : chain.path): \(undecodable)")
                log.error(
                    "the journal's edits to \(chain.path) were not replayed: \(undecodable)",
                    ["document": chain.path, "message_id": MessageID.journalReplayed])
                // Through its last record: the undecodable one and those after it too, or
                // they would keep their segment for as long as the daemon runs.
                journal?.release(owner: owner, through: chain.lastLSN, log: &chain.log)
                continue
            }
            // A document the ignore rules have come to match while the daemon was down (an
            // ignore file written, `Ignore=` changed): its acknowledged edits are replayed all
            // the same, and it is closed once they are saved.
            replayOverridesIgnore = true
            replay(chain, of: chains, into: &summary)
            replayOverridesIgnore = false
            if let entry = entries[chain.path], ignore.ignoring(chain.path, isDirectory: entry.isPackage) != nil {
                if entry.isDirty {
                    log.notice(
                        "\(chain.path) is ignored now; its journalled edits were replayed, and it is closed once they are saved",
                        ["document": chain.path])
                    Task { [weak self] in await self?.closeIgnored(chain.path) }
                } else {
                    remove(chain.path)
                    emit(.closed(document: chain.path))
                }
            }
        }
        return summary
    }

    /// Applies one document's journalled edits again.
    private func replay(_ chain: Chain, of chains: borrowing Chains, into summary: inout JournalReplaySummary) {
        let owner = chain.owner
        let members = chain.members
        let lastLSN = members.last.map { chains.records[$0].lsn } ?? .zero
        let path = chain.path
        var journalLog = chain.log
        func drop(_ why: String?) {
            if let why {
                summary.unapplied.append("\(path): \(why)")
                log.error(
                    "the journal's edits to \(path) were not replayed: \(why)",
                    ["document": path, "message_id": MessageID.journalReplayed])
            }
            journal?.release(owner: owner, through: lastLSN, log: &journalLog)
        }
        guard !members.isEmpty else { return drop(nil) }
        guard !path.isEmpty else {
            // Its first records (which name the document) are lost: nothing to apply them to.
            return drop(
                "\(members.count) records whose document is unknown (the records naming it are missing from the journal)"
            )
        }
        do { _ = try DocumentPath.validate(path) } catch { return drop("\(error)") }
        // The document as it is on disk now (opened by the scan), or nothing.
        if self.entries.index(forKey: path) == nil { _ = try? load(path) }
        let current = self.entries[path]
        let isPackage =
            current?.isPackage ?? registry.isPackage(PathName.lastComponent(path))
        let onDisk: FileIdentity? = current?.fingerprint.flatMap(FileIdentity.init)
        // The latest record naming a version of the file that is the file now.
        var baseToken: UInt64?
        // The bytes the base gives, if any: the version the edits after it apply to, even
        // where the file it names is not that version or is gone.
        var baseContents: Data?
        // A package's base: whether its directory was on disk then.
        var packageWasOnDisk = false
        for marker in chain.markers.reversed() {
            switch marker.entry {
            case .base(_, let file, let token, let contents):
                if isPackage || file == onDisk {
                    baseToken = token
                    baseContents = isPackage ? nil : contents
                    packageWasOnDisk = isPackage && file == .packageOnDisk
                }
            case .saving(_, let token, let file):
                if !isPackage, file == onDisk { baseToken = token }
            default: break
            }
            if baseToken != nil { break }
        }
        // A file no record names may be a save's whose record a power cut took: its mark says so.
        var markedSave: JournalEntry?
        if baseToken == nil, !isPackage, let onDisk,
            let mark = savedMark(of: path, owner: owner, file: onDisk, chainStart: chains.records[members.first!].lsn),
            chain.markers.contains(where: { marker in
                switch marker.entry {
                case .base(_, _, let token, _), .saving(_, let token, _): token <= mark.token
                default: false
                }
            })
        {
            baseToken = mark.token
            baseContents = nil
            markedSave = .saving(path: path, token: mark.token, file: onDisk)
        }
        if let token = baseToken {
            // Every edit after the base's change count, wherever it lies in the chain (those
            // made while a save ran precede the base that save wrote), and only while the
            // change counts run on without a gap: past a gap (records lost to damage) the
            // edits would apply to a version the journal no longer has — until an edit that
            // gives the whole document (`set`), which makes the version known again, and the
            // edits from it on are replayed (the ones between the gap and it are superseded
            // by it: nothing of the document is lost). The list is consecutive but for such
            // a step into a whole edit, so that applying it one by one stays right.
            var edits: [Int] = []
            var expected = token + 1
            // The first change count missing, while no whole edit after it has been found.
            var missing: UInt64?
            // The changes an earlier replay, stopped short at them, left unapplied: reaching
            // the first of them, this one passes over them to the edits made since.
            var skipped: [UInt64: UInt64] = [:]
            for marker in chain.markers {
                if case .skipped(let from, let through) = marker.entry, from > token { skipped[from] = through }
            }
            var passedOver: [ClosedRange<UInt64>] = []
            for index in members where chains.records[index].isEdit && chains.records[index].token > token {
                let record = chains.records[index]
                if missing == nil {
                    while let through = skipped[expected], through >= expected {
                        passedOver.append(expected...through)
                        expected = through + 1
                    }
                    // An edit that earlier replay left unapplied.
                    if record.token < expected, passedOver.contains(where: { $0.contains(record.token) }) { continue }
                }
                if missing == nil, record.token == expected {
                    edits.append(index)
                    expected += 1
                    continue
                }
                let gap = missing ?? expected
                guard record.command?.replacesWholeDocument == true else {
                    missing = gap
                    continue
                }
                log.warning(
                    "the journal lacks edit \(gap) of \(path) (damaged or missing records); the set at change \(record.token) gives the whole document, and the edits from it on were replayed",
                    ["document": path, "message_id": MessageID.journalReplayed])
                missing = nil
                edits.append(index)
                expected = record.token + 1
            }
            if let missing {
                summary.unapplied.append(
                    "\(path): edits from change \(missing) on are missing from the journal; \(edits.count) replayed before them"
                )
                log.error(
                    "the journal lacks edit \(missing) of \(path) (damaged or missing records): the edits after it were not replayed",
                    ["document": path, "message_id": MessageID.journalReplayed])
            }
            // A base naming no file (a new document) with the file still absent: the creation itself.
            let creates = current == nil
            // A package whose directory was on disk, gone now: another program removed it.
            // (Something else at its name — a file, a FIFO — is no removal: the edits are
            // replayed, and their save finds it in the way.)
            let removed =
                creates && packageWasOnDisk
                && (try? FileDescriptor.currentWorkingDirectory.statusIfPresent(of: root + "/" + path)) == .some(nil)
            if removed {
                guard !edits.isEmpty else {
                    log.info(
                        "\(path) was removed by another program while the daemon was down; the journal held no edit of it that was not saved",
                        ["document": path, "message_id": MessageID.externalChange])
                    return drop(nil)
                }
                if configuration.whenRemoved == .close { return drop(Self.removedAndClosed(edits: edits.count)) }
            }
            guard !edits.isEmpty || creates else { return drop(nil) }
            let memberVersions =
                isPackage && current != nil ? Self.memberVersions(chain, of: chains, after: token) : [:]
            var start: Entry
            if let current {
                start = current
                start.changeCount = token
                start.savedChangeCount = token
            } else {
                do { start = try newEntry(path) } catch { return drop("\(error)") }
                start.changeCount = max(token, 1)
            }
            if let baseContents {
                do {
                    start.document = try type(of: start.document).init(
                        configuration: .init(
                            contentType: start.contentType, file: FileWrapper(regularFileWithContents: baseContents)))
                } catch {
                    return drop("the journal's base record of the document cannot be read: \(error)")
                }
            }
            // An edit that gives the whole document supersedes every edit before it: the
            // edits are applied from the last such one on (the others are replayed by it,
            // as a rewritten log replays the writes it folds). Should it be refused, they
            // are applied one by one after all.
            var first = edits.lastIndex { chains.records[$0].command?.replacesWholeDocument == true } ?? 0
            var entry = start
            var applied = 0
            while true {
                entry = start
                applied = 0
                var refused = false
                for position in edits.indices[first...] {
                    let record = chains.records[edits[position]]
                    do {
                        let edit = try record.edit()
                        do { try entry.document.apply(edit, existingFile: entry.existingFile) } catch let error
                            as DocumentContentError where error.kind == .notFound && Self.removesMember(edit)
                        {
                            // A package saved in place, cut between removing a member and writing the
                            // rest: the member is gone already, as the edit wants.
                        } catch let error as DocumentContentError
                            where error.kind == .invalid && entry.isPackage && Self.putMemberPath(edit) != nil
                        {
                            // A package saved in place past this edit (a later save, or one cut
                            // before its record): the members in its way are those of later edits,
                            // replayed after it. (Refused edits are never journalled.)
                            try Self.removeClashes(with: Self.putMemberPath(edit)!, from: &entry)
                            try entry.document.apply(edit, existingFile: entry.existingFile)
                        }
                    } catch {
                        if position == first, first > 0 {
                            refused = true
                            break
                        }
                        // Never refused when it was made (refused edits are not journalled): keep what came before it.
                        summary.unapplied.append(
                            "\(path): the journalled edit \(record.lsn) was refused on replay: \(error)")
                        log.error(
                            "the journalled edit \(record.lsn) of \(path) was refused on replay: \(error); the edits after it were not replayed",
                            ["document": path, "message_id": MessageID.journalReplayed])
                        break
                    }
                    entry.changeCount = record.token
                    applied += 1
                }
                if !refused { break }
                first = 0
            }
            // The superseded edits count as replayed: the document holds what they led to.
            let replayed = first + applied
            for position in edits.indices.prefix(replayed) {
                if let command = chains.records[edits[position]].command { editCounts.count(command) }
            }
            adopt(&entry, owner: owner, log: journalLog, path: path)
            if let markedSave, let journal {
                // The record the cut took, again: a later replay (a crash before this
                // document's save is done) finds the file by it, whatever LSNs come to be.
                markedSave.encode(into: &journalBuffer)
                _ = append(journal, &entry)
            }
            // The change the edits applied reach (the base's, when none applied: a new
            // package's entry counts 1 before any edit).
            let reached = applied > 0 ? entry.changeCount : token
            rebaseIfShort(&entry, chain: chain, of: chains, path: path, reached: reached)
            let changedMembers = membersChangedOnDisk(path, memberVersions)
            let opened = current == nil
            let members = removed ? (entry.document as? PackageDocument)?.memberPaths ?? [] : []
            insert(entry, at: path)
            if opened { emit(.opened(document: path)) }
            summary.edits += replayed
            summary.documents += 1
            if removed {
                summary.recreated.append(path)
                let named =
                    members.prefix(20).map { "'\($0)'" }.joined(separator: ", ") + (members.count > 20 ? ", …" : "")
                log.warning(
                    "\(path) was removed by another program while the daemon was down; writing it again from its \(replayed) journalled edit(s) (WhenRemoved=\(configuration.whenRemoved.rawValue)): it holds only the \(members.count) member(s) they put\(members.isEmpty ? "" : " (\(named))"); the members no edit touched were removed with it",
                    ["document": path, "message_id": MessageID.externalChange])
            }
            guard changedMembers.isEmpty else {
                // Another program changed members the edits put or remove: both versions
                // are kept, as with a file changed while the daemon was down.
                log.warning(
                    "\(path): another program changed \(changedMembers.map { "'\($0)'" }.joined(separator: ", ")) while the daemon was down, members that journalled edits put or remove",
                    ["document": path, "message_id": MessageID.conflict])
                summary.conflicts.append(path)
                resolveReplayedConflict(path)
                return
            }
            saveReplayed(path)
            return
        }
        // The file is not a version the journal knows: another program changed (or removed)
        // it while the daemon was down. The edits' version is rebuilt from the last record
        // that gives the whole document, if any, and kept beside the file's by `[Conflicts]`.
        guard let rebuilt = rebuild(chain, of: chains, path: path) else {
            return drop(
                "the file is not a version the journal knows, and the version the journalled edits apply to is not kept (\(members.count) records): another program changed the file while the daemon was down, or a save put it in place right before a power cut took the journal's record of that save (the file then holds every edit the journal had made durable)"
            )
        }
        if rebuilt.skipped > 0 {
            summary.unapplied.append(
                "\(path): \(rebuilt.skipped) journalled edits after a missing, damaged or refused one were not replayed onto the version rebuilt for the conflict; \(rebuilt.edits) were"
            )
            log.error(
                "the journal lacks an edit of \(path) (damaged or missing records): the \(rebuilt.skipped) edits after it were not replayed onto the version rebuilt for the conflict",
                ["document": path, "message_id": MessageID.journalReplayed])
        }
        guard var entry = current else {
            // Removed while down: by `WhenRemoved=`, the edits' version is saved under the
            // name again, or the edits are discarded.
            if configuration.whenRemoved == .close { return drop(Self.removedAndClosed(edits: rebuilt.edits)) }
            var fresh: Entry
            do { fresh = try newEntry(path) } catch { return drop("\(error)") }
            fresh.document = rebuilt.document
            fresh.changeCount = max(rebuilt.token, 1)
            adopt(&fresh, owner: owner, log: journalLog, path: path)
            rebaseIfShort(&fresh, chain: chain, of: chains, path: path)
            insert(fresh, at: path)
            emit(.opened(document: path))
            summary.edits += rebuilt.edits
            summary.documents += 1
            summary.recreated.append(path)
            log.warning(
                "\(path) was removed by another program while the daemon was down; writing it again from its journalled edits (WhenRemoved=\(configuration.whenRemoved.rawValue))",
                ["document": path, "message_id": MessageID.externalChange])
            saveReplayed(path)
            return
        }
        if !entry.isPackage, let bytes = FileContents.read(root + "/" + path),
            let mine = try? rebuilt.document.fileWrapper(
                configuration: .init(contentType: entry.contentType, existingFile: nil)),
            mine.regularFileContents == bytes
        {
            // The file already holds the edits' version (a save whose record the crash took).
            return drop(nil)
        }
        entry.document = rebuilt.document
        // The change count the records end at (the file's version counts as the change
        // before it): edits made from here on follow them without a gap, and a later
        // rebuild, should this one's save not be made, takes them too.
        entry.changeCount = max(rebuilt.token, entry.changeCount + 1)
        adopt(&entry, owner: owner, log: journalLog, path: path)
        rebaseIfShort(&entry, chain: chain, of: chains, path: path)
        entries[path] = entry
        summary.edits += rebuilt.edits
        summary.documents += 1
        summary.conflicts.append(path)
        resolveReplayedConflict(path)
    }

    /// Why the journalled edits of a document another program removed while the daemon
    /// was down are not replayed under `WhenRemoved=close`: it is closed, as it would have
    /// been had the daemon seen the removal.
    private static func removedAndClosed(edits: Int) -> String {
        "another program removed it while the daemon was down, and WhenRemoved=close discarded its \(edits) journalled edit(s)"
    }

    /// Keeps both versions of a document replay found changed on disk (``resolveConflict(_:)``)
    /// and saves what is left to save. When the conflict copy cannot be written (a name too
    /// long, a directory not writable), the document forgets the file it was read from:
    /// that file is another program's version, not one its edits follow, and each save
    /// retried must find it there unexpected — and try the copy again — never replace it.
    private func resolveReplayedConflict(_ path: String) {
        resolveConflict(path)
        if entries[path]?.failure != nil { entries[path]?.fingerprint = nil }
        if entries[path]?.isDirty == true { saveReplayed(path) }
    }

    /// The ``SaveMark`` on the file at `path`, when it is believed: written by this journal
    /// for `owner`, by a save that started within the chain (`chainStart`: its first
    /// record), on a file of that size and hash.
    private func savedMark(of path: String, owner: UInt64, file: FileIdentity, chainStart: LSN) -> SaveMark? {
        guard journalIdentity != 0,
            let bytes = try? FileDescriptor.currentWorkingDirectory.attribute(
                SaveMark.attributeName, of: root + "/" + path),
            let mark = SaveMark(bytes)
        else { return nil }
        guard mark.journal == journalIdentity, mark.owner == owner, mark.lsn >= chainStart.rawValue, mark.file == file
        else {
            return nil
        }
        return mark
    }

    /// The members of a package that the chain's edits after change `base` put or remove,
    /// each with the versions the package's own doings can have left on disk: the version
    /// before the first of those edits (its `memberBefore` record), and the one each of
    /// them made — replayed or not (a save cut short, or one whose record a power cut
    /// took, can have written any of them). A member whose first such edit has no
    /// `memberBefore` record (one too large to read, or unreadable, when it was made; a
    /// journal of an older version) has no versions (an empty set): it is the package's
    /// own, and nothing tells its versions apart.
    private static func memberVersions(
        _ chain: Chain, of chains: borrowing Chains, after base: UInt64
    ) -> [PathKey: Set<FileIdentity?>] {
        var before: [PathKey: [UInt64: FileIdentity?]] = [:]
        for marker in chain.markers {
            if case .memberBefore(let change, let member, let file) = marker.entry, change > base {
                before[PathKey(member), default: [:]][change] = .some(file)
            }
        }
        guard !before.isEmpty else { return [:] }
        var versions: [PathKey: Set<FileIdentity?>] = [:]
        for index in chain.members {
            let record = chains.records[index]
            guard record.isEdit, record.token > base,
                record.command == .putMember || record.command == .removeMember,
                let edit = try? record.edit()
            else { continue }
            let member: String
            let result: FileIdentity?
            switch edit {
            case .putMember(let name, let data): (member, result) = (name, FileIdentity(data))
            case .removeMember(let name): (member, result) = (name, nil)
            default: continue
            }
            let key = PathKey(member)
            if let known = versions[key] {
                if known.isEmpty { continue }
            } else {
                guard let prior = before[key]?[record.token] else {
                    versions[key] = []
                    continue
                }
                versions[key] = [prior]
            }
            versions[key]!.insert(result)
        }
        return versions
    }

    /// The members of the package at `path` whose file on disk is none of the versions
    /// `versions` gives for it, sorted. A directory in a member's place counts as no
    /// member when every file below it is a member of `versions` (a save cut short, the
    /// member removed and members put below its name: each checked on its own); a file in
    /// the way of a member's directory counts as no member when it is itself a member of
    /// `versions`. Anything else there is another program's. A member with no versions is
    /// not checked, nor is a file that cannot be read (nothing tells them apart).
    private func membersChangedOnDisk(_ path: String, _ versions: [PathKey: Set<FileIdentity?>]) -> [String] {
        let package = root + "/" + path
        let cwd = FileDescriptor.currentWorkingDirectory
        // Whether every entry below `directory` (a member path) is a directory or a file
        // `versions` holds.
        func holdsOnlyMembers(_ directory: String) -> Bool {
            guard let fd = try? FileDescriptor.open(package + "/" + directory, options: [.directory, .noFollow]),
                let entries = try? fd.closeAfter({ () throws(Errno) -> [DirectoryEntry] in try fd.directoryEntries() })
            else { return false }
            for entry in entries {
                let member = directory + "/" + entry.name
                guard let kind = entry.kind ?? (try? cwd.status(of: package + "/" + member))?.kind else { return false }
                switch kind {
                case .directory: if !holdsOnlyMembers(member) { return false }
                case .regular: if versions[PathKey(member)] == nil { return false }
                default: return false
                }
            }
            return true
        }
        // Whether the first component of `member` that is no directory on disk is a file
        // `versions` holds.
        func blockedByAMember(_ member: String) -> Bool {
            var prefix = ""
            for component in PathName.components(member).dropLast() {
                prefix = prefix.isEmpty ? component : prefix + "/" + component
                guard let status = try? cwd.status(of: package + "/" + prefix) else { return false }
                if status.kind != .directory { return status.kind == .regular && versions[PathKey(prefix)] != nil }
            }
            return false
        }
        var changed: [String] = []
        for (member, known) in versions where !known.isEmpty {
            let full = package + "/" + member.path
            let onDisk: FileIdentity?
            do {
                let status = try cwd.status(of: full)
                switch status.kind {
                case .directory:
                    guard holdsOnlyMembers(member.path) else {
                        changed.append(member.path)
                        continue
                    }
                    onDisk = nil
                case .regular:
                    // Of a size no known version has: changed, without reading it.
                    guard known.contains(where: { $0?.size == status.size }) else {
                        changed.append(member.path)
                        continue
                    }
                    guard let bytes = FileContents.read(full) else { continue }
                    onDisk = FileIdentity(bytes)
                default:
                    changed.append(member.path)
                    continue
                }
            } catch let error where error == .noSuchFile {
                onDisk = nil
            } catch let error where error == .notDirectory {
                guard blockedByAMember(member.path) else {
                    changed.append(member.path)
                    continue
                }
                onDisk = nil
            } catch {
                continue
            }
            if !known.contains(onDisk) { changed.append(member.path) }
        }
        return changed.sorted()
    }

    private static func removesMember(_ edit: DocumentEdit) -> Bool {
        if case .removeMember = edit { return true }
        return false
    }

    private static func putMemberPath(_ edit: DocumentEdit) -> String? {
        if case .putMember(let path, _) = edit { return path }
        return nil
    }

    /// Removes the members of a replayed package in the way of a member `path`: those it
    /// is a directory of, or that are directories of it.
    private static func removeClashes(with path: String, from entry: inout Entry) throws {
        guard case .members(let members) = try entry.document.read(.members, existingFile: entry.existingFile) else {
            return
        }
        for member in members
        where PathName.starts(member, with: path + "/") || PathName.starts(path, with: member + "/")
            || member.hasPrefix(path + "/") || path.hasPrefix(member + "/")
        {
            try entry.document.apply(.removeMember(member), existingFile: entry.existingFile)
        }
    }

    /// The document the journalled records of `chain` describe, from the last record that
    /// gives the whole document on: a base with contents, or an edit that replaces everything.
    /// Edits apply one after the other, each to the change before it: after a gap (an edit
    /// missing with a lost segment, one that cannot be decoded or is refused) the ones that
    /// follow are `skipped` until a record gives the whole document again.
    private func rebuild(
        _ chain: Chain, of chains: borrowing Chains, path: String
    ) -> (document: any AutosaveDocument, token: UInt64, edits: Int, skipped: Int)? {
        guard
            let registration = registry.registration(forName: PathName.lastComponent(path), isDirectory: false)
                ?? registry.registration(forName: PathName.lastComponent(path), isDirectory: true),
            !registration.isPackage
        else { return nil }
        var document: (any AutosaveDocument)?
        var token: UInt64 = 0
        var edits = 0
        var skipped = 0
        // The document is not what `token` says: an edit since the last whole one is lost.
        var broken = false
        var markers = chain.markers[...]
        for index in chain.members {
            let record = chains.records[index]
            guard record.isEdit else {
                guard let marker = markers.popFirst(), marker.index == index else { continue }
                if case .base(_, _, let t, let contents) = marker.entry {
                    if let contents {
                        document = try? registration.documentType.init(
                            configuration: .init(
                                contentType: registration.contentType,
                                file: FileWrapper(regularFileWithContents: contents))
                        )
                        token = t
                        broken = false
                    } else if document == nil {
                        token = t
                    }
                }
                continue
            }
            let t = record.token
            if record.command?.replacesWholeDocument == true {
                // From the type's empty document (a JSON document is no empty file).
                if var fresh = try? Self.emptyDocument(registration), let edit = try? record.edit(),
                    (try? fresh.apply(edit, existingFile: nil)) != nil
                {
                    document = fresh
                    token = t
                    edits += 1
                    broken = false
                } else if t > token {
                    broken = true
                    skipped += 1
                }
            } else if document != nil, t > token {
                if !broken, t == token + 1, let edit = try? record.edit() {
                    // Taken out while the edit applies, so that it is changed in place (a copy
                    // per edit made a long chain's rebuild quadratic). An edit refused
                    // leaves it as it was: refused edits are never journalled, so this is
                    // damage, and what follows is skipped.
                    var next = document!
                    document = nil
                    let applied = (try? next.apply(edit, existingFile: nil)) != nil
                    document = next
                    if applied {
                        token = t
                        edits += 1
                        continue
                    }
                }
                broken = true
                skipped += 1
            }
        }
        return document.map { ($0, token, edits, skipped) }
    }

    /// Makes a replayed document's records its own again: its owner, and that the journal
    /// holds what its next edit applies to.
    private func adopt(_ entry: inout Entry, owner: UInt64, log: JournalOwnerLog, path: String) {
        entry.journalOwner = owner
        entry.journalHasBase = true
        entry.journalLog = log
        entry.lastJournalLSN = log.last.rawValue
        journalOwners[owner] = path
    }

    /// After a replay that stopped short of the chain's last edit (a gap, a refused edit):
    /// the document's change count moves past every record of the chain, and a base with
    /// its bytes is journalled at that count (for a package, a ``JournalEntry/skipped(from:through:)``
    /// record naming the changes left unapplied). Its next edits then follow this version,
    /// not the records left unapplied, which a later replay (a crash before the replayed
    /// document's save is done) would otherwise take for the edits before them.
    private func rebaseIfShort(
        _ entry: inout Entry, chain: Chain, of chains: borrowing Chains, path: String, reached: UInt64? = nil
    ) {
        guard let journal else { return }
        var highest: UInt64 = 0
        for index in chain.members where chains.records[index].isEdit {
            highest = max(highest, chains.records[index].token)
        }
        if entry.isPackage {
            // A package's version is not bytes a base could carry: the records say which
            // changes this replay left unapplied, and a later one passes over them.
            let from = (reached ?? entry.changeCount) + 1
            guard highest >= from else { return }
            JournalEntry.skipped(from: from, through: highest).encode(into: &journalBuffer)
            entry.changeCount = max(entry.changeCount, highest)
            _ = append(journal, &entry)
            return
        }
        guard highest > entry.changeCount else { return }
        entry.changeCount = highest
        guard
            let wrapper = try? entry.document.fileWrapper(
                configuration: .init(contentType: entry.contentType, existingFile: nil)),
            let data = wrapper.regularFileContents
        else {
            entry.journalBroken = true
            return
        }
        JournalEntry.base(
            path: path, file: entry.fingerprint.flatMap(FileIdentity.init), token: entry.changeCount, contents: data
        ).encode(into: &journalBuffer)
        _ = append(journal, &entry)
    }

    /// A replayed document is saved at once: the journal is a bridge to the save, not a home.
    private func saveReplayed(_ path: String) {
        guard let entry = entries[path], entry.isDirty else { return }
        entries[path]!.forcedToken = entry.changeCount
        noteEdit(path)
    }

    // MARK: Writing

    /// Refuses an edit while the journal cannot write (it would be acknowledged unprotected).
    func checkJournalWritable() throws(StoreError) {
        guard journal != nil, replyGate.isFailing else { return }
        throw .journalFailing(replyGate.lastFailure.withLock { $0 } ?? "a write failed")
    }

    /// Refuses an edit the journal cannot take — while it cannot write, or whose record
    /// would be larger than it takes: acknowledged, it would be protected from a crash only
    /// once its document was saved.
    @inline(__always)
    func checkJournalTakes(_ edit: DocumentEdit) throws(StoreError) {
        guard journal != nil else { return }
        try checkJournalWritable()
        let size = JournalEntry.editSizeBound(edit)
        guard size > configuration.journalRecordLimit else { return }
        throw .tooLargeForJournal(bytes: size, limit: configuration.journalRecordLimit)
    }

    /// The number under which the journal files `entry`'s records, given at its first one.
    @inline(__always)
    private func giveJournalOwner(_ entry: inout Entry, path: String) {
        guard entry.journalOwner == 0 else { return }
        entry.journalOwner = nextJournalOwner
        nextJournalOwner += 1
        journalOwners[entry.journalOwner] = path
    }

    /// A record of `entry` is about to be appended while its save runs: the save learns
    /// of it first (see ``SaveCommit``).
    @inline(__always)
    private func noteEditDuringSave(_ entry: borrowing Entry) {
        if entry.savingToken != nil, !saveCommits.isEmpty { saveCommits[entry.savingSerial]?.edit() }
    }

    /// Journals an edit just applied to `entry` (its change count already counts it). `base`
    /// is what ``journalBaseContents(_:for:)`` found before the edit was applied, `member`
    /// what ``journalMemberBefore(_:path:for:)`` found.
    func journalEdit(
        _ entry: inout Entry, path: String, _ edit: DocumentEdit, baseContents: Data?, member: MemberBefore? = nil
    ) {
        guard let journal, !entry.journalBroken else { return }
        noteEditDuringSave(entry)
        giveJournalOwner(&entry, path: path)
        if !entry.journalHasBase {
            JournalEntry.base(
                path: path, file: journalBaseFile(entry), token: entry.changeCount - 1, contents: baseContents
            )
            .encode(into: &journalBuffer)
            guard append(journal, &entry) else { return }
            entry.journalHasBase = true
        }
        if let member {
            JournalEntry.memberBefore(token: entry.changeCount, member: member.path, file: member.file)
                .encode(into: &journalBuffer)
            guard append(journal, &entry) else { return }
        }
        // Encoded straight into the journal's batch.
        let token = entry.changeCount
        do {
            let (lsn, size) = try journal.append(
                owner: entry.journalOwner, log: &entry.journalLog, sizeBound: JournalEntry.editSizeBound(edit)
            ) { bytes in JournalEntry.encodeEdit(token: token, edit, appendingTo: &bytes) }
            noteAppended(lsn.rawValue, size: size, &entry)
        } catch {
            tooLargeForJournal(error, &entry)
        }
    }

    /// What a base names as the version on disk its edits apply to: the file's identity,
    /// or for a package whether its directory is on disk (``FileIdentity/packageOnDisk``).
    @inline(__always)
    private func journalBaseFile(_ entry: borrowing Entry) -> FileIdentity? {
        if entry.isPackage { return entry.fingerprint == nil ? nil : .packageOnDisk }
        return entry.fingerprint.flatMap(FileIdentity.init)
    }

    /// Journals a new, empty document (`create`): a base naming no file.
    func journalCreation(_ entry: inout Entry, path: String) {
        guard let journal else { return }
        giveJournalOwner(&entry, path: path)
        JournalEntry.base(path: path, file: nil, token: entry.changeCount, contents: nil).encode(into: &journalBuffer)
        if append(journal, &entry) { entry.journalHasBase = true }
    }

    @inline(__always)
    private func append(_ journal: Journal, _ entry: inout Entry) -> Bool {
        do {
            let lsn = try journal.append(owner: entry.journalOwner, payload: journalBuffer, log: &entry.journalLog)
            noteAppended(lsn.rawValue, size: journalBuffer.count, &entry)
            return true
        } catch {
            tooLargeForJournal(error, &entry)
            return false
        }
    }

    @inline(__always)
    private func noteAppended(_ lsn: UInt64, size: Int, _ entry: inout Entry) {
        journalBytesSinceCheck &+= size + 24
        entry.lastJournalLSN = lsn
        lastJournalLSN = lsn
    }

    /// Larger than a record may be: the document is saved soon instead, and its later
    /// edits are journalled again once that save is done.
    private func tooLargeForJournal(_ error: JournalRecordTooLarge, _ entry: inout Entry) {
        entry.journalBroken = true
        entry.forcedToken = entry.changeCount
        log.warning("an edit was too large for the journal: \(error); the document is saved at once")
    }

    /// The document's contents for a base, taken before its first edit after a durable
    /// version: only when that edit does not give the whole document (otherwise the edit
    /// itself rebuilds it), and only for a small regular file.
    func journalBaseContents(_ entry: Entry, for edit: DocumentEdit) -> Data? {
        // With no file to name (another program removed it, and the document is to be
        // written again), the base's bytes are the only record of the version the edits
        // apply to: kept whatever their size.
        let limit = entry.fingerprint == nil ? Int.max : JournalEntry.baseContentsLimit
        guard journal != nil, !entry.journalHasBase, !entry.journalBroken, !entry.isPackage,
            !edit.replacesWholeDocument, (entry.fingerprint?.size ?? 0) <= limit
        else { return nil }
        guard
            let wrapper = try? entry.document.fileWrapper(
                configuration: .init(contentType: entry.contentType, existingFile: nil)),
            let data = wrapper.regularFileContents, data.count <= limit
        else { return nil }
        return data
    }

    /// A package member as it was right before an edit of it: its path and identity
    /// (`nil`: the package held no such member).
    struct MemberBefore {
        var path: String
        var file: FileIdentity?
    }

    /// The largest member on disk whose identity an edit of it journals; an edit of a
    /// larger one that is not in memory journals none, and replay does not check it.
    static let memberBeforeReadLimit: Int64 = 16 << 20

    /// What the member an edit of a package puts or removes is before the edit, taken
    /// before it is applied: its bytes in memory (put by an edit not saved yet), else the
    /// file on disk the package's last read or save left (the version a save of the
    /// package has not replaced), else none. `nil` for any other edit, and when the file
    /// cannot be read or is larger than ``memberBeforeReadLimit``.
    func journalMemberBefore(_ entry: Entry, path: String, for edit: DocumentEdit) -> MemberBefore? {
        guard journal != nil, entry.isPackage, !entry.journalBroken,
            let package = entry.document as? PackageDocument
        else { return nil }
        let member: String
        switch edit {
        case .putMember(let name, _): member = name
        case .removeMember(let name): member = name
        default: return nil
        }
        let (held, data) = package.member(at: member)
        guard held else { return MemberBefore(path: member, file: nil) }
        if let data { return MemberBefore(path: member, file: FileIdentity(data)) }
        guard let bytes = FileContents.read(root + "/" + path + "/" + member, limit: Self.memberBeforeReadLimit)
        else { return nil }
        return MemberBefore(path: member, file: FileIdentity(bytes))
    }

    /// The document's version in memory no longer follows from a file the journal's
    /// records name: another program removed its file (and the document is to be written
    /// again), or replaced it while the document had unsaved edits that are kept over it.
    /// A base carrying the document's bytes, whatever their size, is journalled now, and
    /// the edits after it apply to that: a crash before the document is written again
    /// finds in the journal the version it was writing (the older records name a file
    /// that is gone or is not this version, and would be dropped).
    func journalRebase(_ entry: inout Entry, path: String) {
        guard let journal, !entry.isPackage else { return }
        guard
            let data = try? entry.document.fileWrapper(
                configuration: .init(contentType: entry.contentType, existingFile: nil)
            ).regularFileContents
        else { return }
        giveJournalOwner(&entry, path: path)
        noteEditDuringSave(entry)
        JournalEntry.base(path: path, file: nil, token: entry.changeCount, contents: data).encode(into: &journalBuffer)
        if append(journal, &entry) {
            entry.journalHasBase = true
            // The base holds whatever edits the journal could not: the chain is whole again.
            entry.journalBroken = false
        }
    }

    /// An edit made through ``modify(_:as:_:)``: the journal cannot hold it, so the
    /// document's journalled chain ends until its next save.
    func journalUnjournalled(_ entry: inout Entry) {
        guard journal != nil else { return }
        unjournalledEdits += 1
        let type = String(describing: Swift.type(of: entry.document))
        if unjournalledTypes.insert(type).inserted {
            log.warning(
                "edits made to \(type) documents through modify(_:as:_:) are not journalled: they are protected from a crash only once saved"
            )
        }
        entry.journalBroken = true
    }

    /// Writes the records appended in this pass (the loop calls it right before the
    /// pass's replies go out), and starts saving the documents that pin the oldest
    /// segment once the journal is past `MaxSize=`. A pass whose records are all written
    /// already (its only new records, if any, are the journal's marks of released
    /// records, which no reply acknowledges) writes nothing here: the marks go out after
    /// the replies (``writeJournalAfterReplies()``), and a client waiting for a save is
    /// answered one `write(2)` sooner.
    @discardableResult
    func writeJournal() -> UInt64? {
        guard let journal, lastJournalLSN > journalFlushedThrough else { return nil }
        // The sync the records call for starts when the loop polls (``startJournalSync(loopWillSleep:)``).
        let before = journalFlushedThrough
        let written = journal.flush(deferringSync: true).rawValue
        journalFlushedThrough = written
        if written > before { journalSyncPending = true }
        var wait: UInt64?
        if written < lastJournalLSN {
            // The write failed: edits are refused until the journal has written the records
            // again; the replies to those this pass appended wait until they are synced.
            replyGate.barrier.store(lastJournalLSN, ordering: .releasing)
            if lastJournalLSN > journalWaitIssued {
                journalWaitIssued = lastJournalLSN
                wait = lastJournalLSN
                // Synced as soon as the journal has written them again, not at the next
                // periodic sync: the replies held for them wait for that.
                journal.requestSync(through: LSN(lastJournalLSN))
            }
        }
        if written > before { replyGate.advance(written: written) }
        // The size is looked at after every sixteenth of MaxSize= written.
        if journalBytesSinceCheck > configuration.journalMaxSize / 16 {
            journalBytesSinceCheck = 0
            compactIfNeeded(journal)
        }
        return wait
    }

    /// Writes what the pass left in the journal's batch after its replies went out: the
    /// marks of the records its saves released (see ``writeJournal()``).
    func writeJournalAfterReplies() {
        guard let journal else { return }
        let written = journal.flush(deferringSync: true).rawValue
        if written > journalFlushedThrough {
            journalFlushedThrough = written
            journalSyncPending = true
            replyGate.advance(written: written)
        }
    }

    /// Starts the group commit of the records the loop's passes wrote, once a pass wrote
    /// some and a sync is called for (`Mode=always`, `"durable": true`). When the loop is
    /// about to sleep, it syncs them itself: it would otherwise sleep until the sync
    /// thread had synced them and woken it, two hand-offs a lone client waits for —
    /// unless the last sync took longer than `LoopWriteLimit=` (a slow disk is left to the
    /// sync thread, so that the loop never stalls on it). While the loop stays busy, the
    /// sync thread is asked at the second pass after the write, and syncs while the loop
    /// goes on. Returns whether the loop synced.
    func startJournalSync(loopWillSleep: Bool) -> Bool {
        guard let journal, journalSyncPending else { return false }
        if !loopWillSleep {
            journalBusyPasses += 1
            guard journalBusyPasses >= 2 else { return false }
        }
        journalBusyPasses = 0
        journalSyncPending = false
        let limit = configuration.loopWriteLimit
        return journal.startDeferredSync(onCaller: loopWillSleep && limit > .zero, ifLastSyncTookAtMost: limit)
    }

    /// Past `MaxSize=`, saves the documents whose records keep the oldest segments: their
    /// saves release the records, and the segments are deleted.
    ///
    /// One round at a time: the documents a round waits for are in
    /// ``journalCompactionDocuments``, and the next round starts once the last of them
    /// has finished its save (or left the store) — not after every save, which with
    /// thousands of documents pinning the oldest segments would look at all of them
    /// again each time.
    func compactIfNeeded(_ journal: Journal) {
        guard journalCompactionDocuments.isEmpty else { return }
        journalCompacting = false
        let bytes = journal.statistics.bytes
        guard bytes > configuration.journalMaxSize else { return }
        var started = 0
        // Enough of the oldest segments to be back at three quarters of the limit.
        for owner in journal.pinningOwners(toFree: bytes - configuration.journalMaxSize * 3 / 4) {
            guard let path = journalOwners[owner], let index = entries.index(forKey: path) else { continue }
            let (dirty, saving, covered) = entries[index].compactionState
            guard dirty else { continue }
            journalCompactionDocuments.insert(PathKey(path))
            // Saving already, or already due for a save that covers every edit: it comes anyway.
            if saving || covered { continue }
            entries[index].forcedToken = entries[index].changeCount
            schedule(path)
            started += 1
        }
        // Looked at again once these saves (and those already running or due) finish,
        // until the journal is back under the limit.
        journalCompacting = !journalCompactionDocuments.isEmpty
        if started > 0 {
            log.info(
                "the journal holds \(bytes) bytes, past MaxSize= (\(configuration.journalMaxSize)): saving the \(started) documents its oldest segment holds edits of"
            )
            processDue()
        }
    }

    /// A request with `"durable": true`: its reply waits until everything journalled so far is synced.
    func requireDurable(_ connection: Connection) {
        guard let journal else { return }
        connection.require(durable: lastJournalLSN)
        journal.requestSync(through: LSN(lastJournalLSN))
    }

    /// The reply queued next on `connection` acknowledges that edits were discarded (a
    /// revert): it goes out once the journal has written the marks releasing them (synced,
    /// with `Mode=always`), which are otherwise written after this pass's replies. A crash
    /// in between would have replay bring back what the client was told is gone. The
    /// reply waits for the marks themselves, not for whatever the flush wrote: a flush
    /// that fails, or that finds the journal writing its records again after a failure,
    /// writes nothing.
    func requireReleaseWritten(_ connection: Connection) {
        guard let journal else { return }
        let marks = journal.lastAppended
        journal.flush()
        let always = configuration.journalMode == .always
        connection.require(written: marks.rawValue, durable: always)
        if always { journal.requestSync(through: marks) }
    }

    // MARK: Saves and truncation

    /// The record of the file a save puts in place (see ``JournalEntry/saving(path:token:file:)``),
    /// written while the save's bytes are synced: `nil` when the document has no journalled
    /// records. Once the file is in place, replay can match it only through this record:
    /// were it lost to a power cut, edits made during the save (synced, and acknowledged
    /// as durable) would find no version to apply to. So the file carries what the record
    /// would say as an extended attribute (``SaveMark``), made durable with its bytes, and
    /// the save writes no record and waits for nothing of the journal. Where the file
    /// system keeps no such attributes, the record is written, and durable before the
    /// rename: with `Mode=always`,
    /// and with `periodic` when the document was edited during the save or the edits it
    /// holds are not durable yet (``SaveCommit``); that sync overlaps the file's own and
    /// is shared with other records.
    func journalSaving(_ entry: Entry, path: String, token: UInt64) -> SavingJournalRecord? {
        guard let journal, entry.journalOwner != 0, !entry.isPackage else { return nil }
        let owner = entry.journalOwner
        let identity = journalIdentity
        let write: @Sendable (FileIdentity, Bool) -> UInt64 = { file, sync in
            var bytes: [UInt8] = []
            JournalEntry.saving(path: path, token: token, file: file).encode(into: &bytes)
            // Taken into the document's log when the save is done (``journalSaved``); until
            // then the document's older records keep its segment.
            guard let lsn = try? journal.appendUnattached(owner: owner, payload: bytes) else { return 0 }
            journal.flush()
            // Synced while the file's own bytes are: the rename waits for both.
            if sync { journal.requestSync(through: lsn) }
            return lsn.rawValue
        }
        let preceding = entry.savingLSN
        let mark: @Sendable (FileIdentity) -> [UInt8] = { file in
            SaveMark(journal: identity, owner: owner, token: token, lsn: preceding, file: file).bytes
        }
        let directory = configuration.journalDirectory
        let settle: @Sendable (UInt64) throws -> Void = { lsn in
            func failed(_ why: String) -> DocumentError {
                DocumentError(
                    operation: .sync, path: directory, errno: .ioError,
                    detail: "the journal's record of this save could not be made durable (\(why)); nothing was replaced"
                )
            }
            // Not appended (the journal refuses records while it fails): nothing of the
            // journal is acknowledged as durable meanwhile, and the save goes ahead — it is
            // what makes the edits durable then.
            guard lsn != 0 else { return }
            var deadline = DispatchTime.now() + 10
            var failedOnce = false
            while true {
                let synced = DispatchSemaphore(value: 0)
                let failure = Mutex(false)
                journal.whenDurable(LSN(lsn)) { error in
                    failure.withLock { $0 = error != nil }
                    synced.signal()
                }
                if synced.wait(timeout: deadline) == .timedOut {
                    // The journal failing still, its recovery not through within a second:
                    // the save goes ahead, for the reason above.
                    if failedOnce { return }
                    // A sync that does not end in 10 s fails the save, which is tried again
                    // after its backoff.
                    throw failed("no sync within 10 s")
                }
                if !failure.withLock({ $0 }) { return }
                // A failed sync: the journal writes every record not yet durable again (its
                // recovery starts at once), and the record is waited for there, a second at
                // most — an edit made during the save may have been acknowledged as
                // durable, and needs it.
                if !failedOnce {
                    failedOnce = true
                    deadline = min(deadline, DispatchTime.now() + 1)
                }
                if DispatchTime.now() >= deadline { return }
            }
        }
        return SavingJournalRecord(write: write, mark: mark, settle: settle)
    }

    /// A durable save of `entry` covering its edits through `token` is done: the records
    /// it covers are released. Edits made while it ran stay, now on top of the file the
    /// save wrote (a new base records it).
    func journalSaved(_ entry: inout Entry, path: String, savingRecord: UInt64) {
        guard let journal, entry.journalOwner != 0 else { return }
        let owner = entry.journalOwner
        entry.lastJournalLSN = max(entry.lastJournalLSN, savingRecord)
        if savingRecord != 0 { journal.adopt(LSN(savingRecord), owner: owner, into: &entry.journalLog) }
        if entry.journalBroken {
            if entry.isDirty {
                // Edits since the unjournalled one are not in the journal: protected again from the next save on.
                journal.release(owner: owner, through: LSN(entry.lastJournalLSN), log: &entry.journalLog)
                entry.journalHasBase = false
                return
            }
            entry.journalBroken = false
        }
        if entry.isDirty {
            JournalEntry.base(path: path, file: journalBaseFile(entry), token: entry.savedChangeCount, contents: nil)
                .encode(into: &journalBuffer)
            if append(journal, &entry) {
                journal.release(owner: owner, through: LSN(entry.savingLSN), log: &entry.journalLog)
                entry.journalHasBase = true
            }
        } else {
            journal.release(owner: owner, through: LSN(entry.lastJournalLSN), log: &entry.journalLog)
            entry.journalHasBase = false
        }
    }

    /// A save that failed after writing its record: the record is counted among the
    /// document's, so that the release of them covers it.
    func journalAdopt(_ entry: inout Entry, savingRecord: UInt64) {
        guard let journal, entry.journalOwner != 0 else { return }
        journal.adopt(LSN(savingRecord), owner: entry.journalOwner, into: &entry.journalLog)
        entry.lastJournalLSN = max(entry.lastJournalLSN, savingRecord)
    }

    /// The document's edits are gone (reverted, read again from disk, closed): its
    /// records are released, and its next edit starts a new chain.
    /// Releases the record of a save whose document was closed before the save ended (the
    /// close released the document's other records).
    func journalReleaseClosed(owner: UInt64, savingRecord: UInt64) {
        guard let journal, owner != 0 else { return }
        var log = JournalOwnerLog()
        journal.adopt(LSN(savingRecord), owner: owner, into: &log)
        journal.release(owner: owner, through: LSN(savingRecord), log: &log)
    }

    func journalDiscard(_ entry: inout Entry, closing: Bool = false) {
        guard let journal, entry.journalOwner != 0 else { return }
        journal.release(owner: entry.journalOwner, through: LSN(entry.lastJournalLSN), log: &entry.journalLog)
        entry.journalHasBase = false
        entry.journalBroken = false
        if closing { journalOwners[entry.journalOwner] = nil }
    }

    /// Another program renamed the document's file; the document followed it.
    /// A clean document (no base) has no record to name the new path: its next edit's base
    /// does. Its owner is filed under the new path either way, for `MaxSize=` compaction.
    func journalMoved(_ entry: inout Entry, to path: String) {
        guard let journal, entry.journalOwner != 0 else { return }
        journalOwners[entry.journalOwner] = path
        guard entry.journalHasBase else { return }
        JournalEntry.moved(path: path).encode(into: &journalBuffer)
        _ = append(journal, &entry)
    }

    // MARK: Closing and reporting

    /// Writes and syncs what is left and closes the journal. Edits not saved stay in it
    /// and are replayed at the next start; returns how many documents that is. With
    /// `removingSegments` (every document saved: nothing is kept), the segment files are
    /// removed before the journal's directory is let go (``Journal/close(removingSegments:)``).
    public func closeJournal(removingSegments: Bool = false) -> (keptDocuments: [String], failure: JournalFailure?) {
        guard let journal else { return ([], nil) }
        loop.beforeReplies = nil
        let kept = entries.filter { $0.value.isDirty && $0.value.journalOwner != 0 && !$0.value.journalBroken }
            .map(\.key).sorted()
        let failure = journal.close(removingSegments: removingSegments && kept.isEmpty) { notRemoved in
            log.warning(
                "the journal's edits were saved, but its segments could not be removed: \(notRemoved)",
                ["message_id": MessageID.journalFailed, "path": journal.directory])
        }
        self.journal = nil
        return (kept, failure)
    }

    public var journalSummary: JournalSummary? {
        guard let journal else { return nil }
        let figures = journal.statistics
        return JournalSummary(
            mode: configuration.journalMode.rawValue, directory: journal.directory, bytes: figures.bytes,
            segments: figures.segments, spareSegments: figures.spareSegments, memoryBytes: figures.memoryBytes,
            unsavedRecords: figures.unreleasedRecords,
            writtenThrough: figures.writtenThrough.rawValue, durableThrough: figures.durableThrough.rawValue,
            syncs: figures.syncs, lastSyncAgo: figures.lastSync.map { ContinuousClock.now - $0 },
            failure: figures.failure?.description, unjournalledEdits: unjournalledEdits,
            unjournalledTypes: unjournalledTypes.sorted(), lastReplay: lastReplay)
    }
}

/// What the journal's label says: the journal's identity (``SaveMark/journal``: a random
/// number drawn at every start, see ``DocumentStore/renewJournalIdentity(_:label:)``), and the store root
/// — its path, and the directory's device and inode when the label was written. The path
/// comes last, whole, whatever bytes it holds. A label written before the identity was
/// kept has none (0).
struct JournalRootLabel {
    var identity: UInt64
    var path: String
    var device: UInt64
    var inode: UInt64

    var text: String {
        "id \(String(identity, radix: 16))\ndevice \(device)\ninode \(inode)\nroot \(path)"
    }

    init(identity: UInt64, path: String, device: UInt64, inode: UInt64) {
        self.identity = identity
        self.path = path
        self.device = device
        self.inode = inode
    }

    /// `nil` for a label of another shape.
    init?(parsing text: String) {
        var lines = text.utf8.split(separator: UInt8(ascii: "\n"), maxSplits: 3, omittingEmptySubsequences: false)
        func value(_ line: Substring.UTF8View, _ key: String) -> Substring? {
            let line = Substring(line)
            guard line.utf8.starts(with: (key + " ").utf8) else { return nil }
            return Substring(line.utf8.dropFirst(key.utf8.count + 1))
        }
        var identity: UInt64 = 0
        if let first = lines.first, let id = value(first, "id") {
            guard let number = UInt64(id, radix: 16), number != 0 else { return nil }
            identity = number
            lines.removeFirst()
        } else {
            // A label of three lines: the path may hold newlines of its own.
            lines = text.utf8.split(separator: UInt8(ascii: "\n"), maxSplits: 2, omittingEmptySubsequences: false)
        }
        guard lines.count == 3, let device = value(lines[0], "device").flatMap({ UInt64($0) }),
            let inode = value(lines[1], "inode").flatMap({ UInt64($0) }),
            let path = value(lines[2], "root"), !path.isEmpty
        else { return nil }
        self.init(identity: identity, path: String(path), device: device, inode: inode)
    }
}

/// The journal's records are of documents under another store root (`Root=` changed
/// while some were not saved): replayed here, they would be laid over another root's
/// files, or make files of the other root's documents in this one.
public struct JournalOfAnotherRoot: Error, Sendable, CustomStringConvertible {
    public var directory: String
    public var recordedRoot: String
    public var root: String
    public var records: Int

    public var description: String {
        "the edit journal in \(directory) holds \(records) records of documents under \(recordedRoot), not under Root=\(root); they are not replayed onto another root's files. Start once with Root=\(recordedRoot) to replay and save them, or move \(directory) aside to start without them"
    }
}
