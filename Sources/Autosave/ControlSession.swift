import Control
import Documents
import Foundation
import Posix

/// A request that cannot be carried out, with the protocol's error code.
struct RequestError: Error {
    var code: ControlProtocol.ErrorCode
    var message: String

    init(_ code: ControlProtocol.ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    init(_ error: StoreError) {
        self.code = ControlProtocol.ErrorCode(rawValue: error.code) ?? .internalError
        self.message = error.description
    }
}

/// The commands of one connection. Requests are handled in order, except `export`,
/// which runs beside later requests so that `cancel` can reach it.
final class ControlSession: Sendable {
    let server: ControlServer
    let connection: Connection
    private let exports = Lock(RunningExports())
    private let subscription = Lock<Task<Void, Never>?>(nil)

    init(server: ControlServer, connection: Connection) {
        self.server = server
        self.connection = connection
    }

    deinit {
        subscription.withLock { $0?.cancel() }
    }

    var store: DocumentStore { server.store }

    /// Ends what the connection started — running exports are cancelled (and leave
    /// nothing behind), the subscription stops — and waits until they have.
    func finish(isolation: isolated (any Actor)? = #isolation) async {
        let running = exports.withLock { $0.all }
        let events = subscription.withLock { task in
            defer { task = nil }
            return task
        }
        for task in running { task.cancel() }
        events?.cancel()
        for task in running { await task.value }
        await events?.value
    }

    /// Answers the request on `line` at once, on the store's thread, when its command
    /// needs no waiting (``ControlRequest/isImmediate``), and a line refused before its
    /// command; otherwise returns the request (its own copy, independent of `line`), to
    /// be handled by ``handle(_:store:)-(ControlRequest,_)``.
    func handleNow(
        _ line: UnsafeRawBufferPointer, memo: inout EditMemo, store: isolated DocumentStore
    ) -> ControlRequest? {
        switch RequestDecoder.decode(line) {
        case .refused(let id, let message):
            connection.send { Self.writeError(id: id, code: .badRequest, message: message, into: &$0) }
            return nil
        case .request(let request):
            guard request.isImmediate else { return request.owned() }
            answerNow(request, memo: &memo, store: store)
            return nil
        }
    }

    /// What a connection keeps between its requests. Kept by ``ConnectionReader``.
    struct EditMemo {
        /// The seconds this connection's replies formatted last.
        var timestamps = EditReply.TimestampCache()
    }

    /// `set` and `append`: a document the store holds is found by the bytes of the path
    /// the request carries (no path string is made, nor checked again: it was when the
    /// document was opened); any other goes through the store's checks with a string. The
    /// reply is written by ``EditReply``.
    private func applyEdit(
        id: LineBytes?, document: DocumentName, _ edit: (_ isJSON: Bool) -> DocumentEdit, create: Bool,
        memo: inout EditMemo, store: isolated DocumentStore
    ) {
        let outcome: EditOutcome
        let path: String
        do {
            if let found = document.bytes.withBytes({ store.entries.index(forBytes: $0) }) {
                path = store.entries.key(at: found)
                outcome = try store.apply(edit(Self.isJSONPath(path)), openedAt: found, path: path)
            } else {
                let named = document.path
                (outcome, path) = try store.apply(
                    edit(Self.isJSONPath(named)), named: named, create: create, unopened: server)
            }
        } catch {
            sendFailure(id, error)
            return
        }
        let connection = connection
        if let id {
            id.withBytes {
                EditReply.send(idText: $0, path: path, outcome, to: connection, timestamps: &memo.timestamps)
            }
        } else {
            EditReply.send(idText: nil, path: path, outcome, to: connection, timestamps: &memo.timestamps)
        }
    }

    /// `"durable": true` on a request: its reply waits until the journal has synced every
    /// record written so far (its own edit's included). Returns `nil` after answering a
    /// request whose flag is bad, or that asks for durability without a journal.
    private func durableFlag(_ request: ControlRequest, store: isolated DocumentStore) -> Bool? {
        let durable: Bool
        do { durable = try request.durable.get() } catch {
            sendFailure(request.id, error)
            return nil
        }
        if durable, store.journal == nil {
            sendFailure(
                request.id,
                RequestError(
                    .badRequest,
                    "\"durable\": true needs the edit journal, and it is off ([Journal] Mode=off); nothing was done"))
            return nil
        }
        return durable
    }

    /// Answers a request whose command is immediate (``ControlRequest/isImmediate``).
    private func answerNow(_ request: ControlRequest, memo: inout EditMemo, store: isolated DocumentStore) {
        guard let durable = durableFlag(request, store: store) else { return }
        answerNow(request, memo: &memo, store: store, replyNeedsSync: store.replyNeedsSync)
        if durable { store.requireDurable(connection) }
    }

    private func answerNow(
        _ request: ControlRequest, memo: inout EditMemo, store: isolated DocumentStore, replyNeedsSync: Bool
    ) {
        // The reply to an edit goes out once the edit's record is written (synced, with
        // Mode=always): whenever the connection is flushed, even after a journal write failed.
        let appendedBefore = store.lastJournalLSN
        defer {
            let appended = store.lastJournalLSN
            if appended > appendedBefore {
                connection.require(written: appended, durable: replyNeedsSync)
            } else if replyNeedsSync {
                connection.require(durable: appended)
            }
        }
        let id = request.id
        do {
            switch request.command {
            case .set(let document, let contents):
                let document = try document.get()
                // Each closure is passed where it is written: kept in a variable, its
                // context would be allocated on the heap for every request.
                switch try contents.get() {
                case .json(let json):
                    let text = json.serialized() + "\n"
                    applyEdit(
                        id: id, document: document, { _ in .setJSON(text) }, create: true, memo: &memo, store: store)
                case .text(let text):
                    applyEdit(
                        id: id, document: document, { isJSON in isJSON ? .setJSON(text) : .setText(text) },
                        create: true, memo: &memo, store: store)
                case .data(let data):
                    applyEdit(
                        id: id, document: document, { _ in .setData(data) }, create: true, memo: &memo, store: store)
                }
            case .append(let document, let text):
                let document = try document.get()
                let text = try text.get()
                applyEdit(id: id, document: document, { _ in .append(text) }, create: false, memo: &memo, store: store)
            case .list:
                let documents = store.list()
                connection.send { writer in
                    Self.beginSuccess(id: id, into: &writer)
                    writer.key("documents")
                    writer.beginArray()
                    for info in documents { Self.describe(info, into: &writer) }
                    writer.endArray()
                    writer.endObject()
                }
            case .get(let document, let query):
                let path = try self.document(document)
                let query = try query.get()
                try get(id: id, path, query, store: store)
            default:
                let info = try immediateDocumentCommand(request.command, store: store)
                connection.send { Self.writeDocumentReply(id: id, info, into: &$0) }
            }
        } catch {
            sendFailure(id, error)
        }
    }

    /// Applies an edit from a request. A document the store holds needs no look at the
    /// disk (the store checks the path's form; saves refuse symbolic links); any other is
    /// checked beneath the root like every request's.
    private func apply(
        _ edit: DocumentEdit, to path: String, create: Bool = false, store: isolated DocumentStore
    ) throws -> DocumentInfo {
        let path = try DocumentPath.validate(path)
        return try store.apply(edit, named: path, create: create, unopened: server).outcome.info(path: path)
    }

    /// Whether `path`'s extension is `json`, in any case: `set` with `text` parses such a
    /// document's text as JSON. A name that is only `.json` has no extension (a raw-data
    /// document, as ``PathName/pathExtension(_:)`` and the registry see it).
    static func isJSONPath(_ path: String) -> Bool {
        var path = path
        return path.withUTF8 { bytes in
            guard bytes.count >= 6, bytes[bytes.count - 6] != UInt8(ascii: "/") else { return false }
            let suffix = UnsafeBufferPointer(rebasing: bytes[(bytes.count - 5)...])
            return suffix[0] == UInt8(ascii: ".") && suffix[1] | 0x20 == UInt8(ascii: "j")
                && suffix[2] | 0x20 == UInt8(ascii: "s") && suffix[3] | 0x20 == UInt8(ascii: "o")
                && suffix[4] | 0x20 == UInt8(ascii: "n")
        }
    }

    /// Handles one request line, whatever its command.
    func handle(_ line: [UInt8], store: isolated DocumentStore) async {
        let decoded = line.withUnsafeBytes { RequestDecoder.decode($0).owned() }
        switch decoded {
        case .refused(let id, let message):
            connection.send { Self.writeError(id: id, code: .badRequest, message: message, into: &$0) }
        case .request(let request):
            await handle(request, store: store)
        }
    }

    /// Handles one decoded request, whatever its command.
    func handle(_ request: ControlRequest, store: isolated DocumentStore) async {
        let id = request.id
        if request.isImmediate {
            var memo = EditMemo()
            answerNow(request, memo: &memo, store: store)
            return
        }
        if case .export(let docs, let to, let type) = request.command {
            // `durable`: the reply waits until what the journal holds when it is sent is synced.
            guard let durable = durableFlag(request, store: store) else { return }
            let key = id.map { String(decoding: $0.array, as: UTF8.self) } ?? UUID().uuidString
            // Listed before its task starts: one that ends at once takes itself off the
            // list, and is not put back after.
            let token = exports.withLock { $0.add(key) }
            let task = Task {
                do {
                    let paths = try await self.export(docs: docs, to: to, type: type, id: id)
                    if durable { await self.store.requireDurable(self.connection) }
                    self.sendSuccess(id) { writer in
                        writer.key("paths")
                        writer.beginArray()
                        for path in paths { writer.string(path) }
                        writer.endArray()
                    }
                } catch {
                    self.sendFailure(id, error)
                }
                self.exports.withLock { $0.remove(key, token) }
            }
            exports.withLock { $0.set(key, token, task) }
            return
        }
        guard let durable = durableFlag(request, store: store) else { return }
        // The records written so far are synced before the reply, whenever it leaves: a
        // save with `wait` sends its reply from inside the save's completion, before this
        // returns. The request's own edit, if any, is required after it is made.
        if durable { store.requireDurable(connection) }
        defer { if durable { store.requireDurable(connection) } }
        // Inline, not through a closure: a closure would run off the caller's (the store's) thread.
        do { try await run(request, store: store) } catch { sendFailure(id, error) }
    }

    /// Queues `{"id": …, "ok": true, …}` with the fields `body` writes.
    private func sendSuccess(_ id: LineBytes?, _ body: (inout JSONWriter) -> Void) {
        connection.send { writer in
            Self.beginSuccess(id: id, into: &writer)
            body(&writer)
            writer.endObject()
        }
    }

    /// Queues the error reply for `error`.
    private func sendFailure(_ id: LineBytes?, _ error: any Error) {
        let (code, message) = Self.codeAndMessage(error)
        connection.send { Self.writeError(id: id, code: code, message: message, into: &$0) }
    }

    static func codeAndMessage(_ error: any Error) -> (ControlProtocol.ErrorCode, String) {
        switch error {
        case let error as RequestError: (error.code, error.message)
        case let error as FieldError: (.badRequest, error.message)
        case let error as StoreError:
            (ControlProtocol.ErrorCode(rawValue: error.code) ?? .internalError, error.description)
        case is CancellationError: (.cancelled, "cancelled")
        default: (.internalError, "\(error)")
        }
    }

    /// `{"id": …, "ok": false, "error": {"code": …, "message": …}}` (the id only when given).
    static func writeError(
        id: LineBytes?, code: ControlProtocol.ErrorCode, message: String, into writer: inout JSONWriter
    ) {
        beginReply(id: id, ok: false, into: &writer)
        writer.key("error")
        writer.beginObject()
        writer.key("code")
        writer.string(code.rawValue)
        writer.key("message")
        writer.string(message)
        writer.endObject()
        writer.endObject()
    }

    // MARK: Fields

    /// The document path of a request, checked to stay inside the root.
    func document(_ field: Checked<String>) throws -> String {
        let path = try field.get()
        try server.checkBeneathRoot(path)
        return path
    }

    /// `save`, answered once the save has started or, with `wait`, once it is durable: then
    /// from inside the save's completion, the moment the file is in place, and written to
    /// the socket at once (``DocumentStore/save(_:wait:onSaved:)``), not after this task
    /// has been resumed and the loop's pass has come to its replies. The connection reads
    /// no further request while this one waits, so no later reply can go before it.
    private func save(
        id: LineBytes?, _ document: Checked<String>, wait: Checked<Bool>, store: isolated DocumentStore
    ) async throws {
        // A document the store holds needs no look at the disk (as for edits); only one
        // it does not hold is checked beneath the root, for the error to name.
        let path = try document.get()
        if !store.isOpen(path) { try server.checkBeneathRoot(path) }
        let connection = connection
        let answered = try await store.save(path, wait: try wait.get()) { info in
            connection.send { Self.writeDocumentReply(id: id, info, into: &$0) }
            connection.flushNow()
        }
        if answered { return }
        let info = try store.info(path)
        connection.send { Self.writeDocumentReply(id: id, info, into: &$0) }
    }

    /// The commands that answer with one document's description and need no waiting.
    private func immediateDocumentCommand(
        _ command: ControlRequest.Command, store: isolated DocumentStore
    ) throws -> DocumentInfo {
        switch command {
        case .open(let document):
            return try store.open(try self.document(document))
        case .create(let document):
            return try store.create(try self.document(document))
        case .revert(let document):
            let info = try store.revert(try self.document(document))
            // Acknowledged once the journal has the mark that releases the discarded edits:
            // replay must not bring them back.
            store.requireReleaseWritten(connection)
            return info
        case .replace(let document, let offset, let length, let text):
            let path = try document.get()
            let edit = DocumentEdit.replace(offset: try offset.get(), length: try length.get(), with: try text.get())
            return try apply(edit, to: path, store: store)
        case .patch(let document, let patch):
            let path = try document.get()
            return try apply(.mergePatch(try patch.get()), to: path, store: store)
        case .putMember(let document, let member, let contents):
            let path = try document.get()
            let member = try member.get()
            return try apply(.putMember(member, try contents.get()), to: path, store: store)
        case .removeMember(let document, let member):
            let path = try document.get()
            return try apply(.removeMember(try member.get()), to: path, store: store)
        default:
            throw RequestError(.internalError, "not a document command: \(command)")
        }
    }

    // MARK: Commands

    private func run(_ request: ControlRequest, store: isolated DocumentStore) async throws {
        let id = request.id
        switch request.command {
        case .save(let document, let wait):
            try await save(id: id, document, wait: wait, store: store)
        case .status:
            try await status(id: id, store: store)
        case .metrics:
            let text = await Metrics.render(store: store, connections: server.connectionCount)
            sendSuccess(id) { writer in
                writer.key("text")
                writer.string(text)
            }
        case .saveAll(let wait):
            try await store.saveAll(wait: try wait.get())
            let unsaved = store.status().unsaved
            sendSuccess(id) { writer in
                writer.key("unsaved")
                writer.integer(unsaved)
            }
        case .close(let document):
            let path = try self.document(document)
            try await store.close(path)
            sendSuccess(id) { writer in
                writer.key("doc")
                writer.string(path)
            }
        case .cancel(let target):
            let target = try target.get()
            let key = String(decoding: target, as: UTF8.self)
            let tasks = exports.withLock { $0.running(key) }
            guard !tasks.isEmpty else {
                throw RequestError(.notFound, "no running export has id \(key)")
            }
            for task in tasks { task.cancel() }
            sendSuccess(id) { writer in
                writer.key("cancelled")
                writer.json(target)
            }
        case .subscribe(let docs, let events):
            try subscribe(id: id, docs: docs, events: events)
        case .sync:
            await store.sync()
            sendSuccess(id) { writer in
                writer.key("synced")
                writer.bool(true)
            }
        case .reload:
            switch await server.reload() {
            case .success(let message):
                sendSuccess(id) { writer in
                    writer.key("message")
                    writer.string(message)
                }
            case .failure(let errors):
                throw RequestError(.badRequest, "the configuration was not reloaded: \(errors.description)")
            }
        case .unknown(let command):
            throw RequestError(
                .unknownCommand,
                "unknown command \"\(command)\"; commands: \(ControlProtocol.commands.joined(separator: ", "))")
        default:
            throw RequestError(.internalError, "not a waiting command: \(request.command)")
        }
    }

    private func status(id: LineBytes?, store: isolated DocumentStore) async throws {
        let status = store.status()
        let ignore = store.ignoreSummary
        let journal = store.journalSummary
        let mode = store.configuration.journalMode
        let watch = store.watchSummary
        let connections = server.connectionCount
        let ioURing = store.ioURingSummary
        let root = store.root
        let allocator = Allocator.usage()
        let resident = MemoryTrimmer.residentBytes()
        sendSuccess(id) { writer in
            writer.key("version")
            writer.string(Daemon.version)
            writer.key("root")
            writer.string(root)
            writer.key("documents")
            writer.integer(status.documents)
            writer.key("unsaved")
            writer.integer(status.unsaved)
            writer.key("saving")
            writer.integer(status.saving)
            writer.key("failed")
            writer.integer(status.failed)
            writer.key("saves")
            writer.integer(status.saves)
            writer.key("uptime_seconds")
            writer.number(Date().timeIntervalSince(status.startedAt).rounded())
            writer.key("connections")
            writer.integer(connections)
            writer.key("io_uring")
            writer.beginObject()
            writer.key("state")
            writer.string(ioURing.state)
            writer.key("error")
            if let refusal = ioURing.refusal { writer.string(refusal) } else { writer.null() }
            writer.key("receive_batches")
            writer.integer(Int(clamping: ioURing.receiveBatches))
            writer.key("receives")
            writer.integer(Int(clamping: ioURing.receives))
            writer.key("send_batches")
            writer.integer(Int(clamping: ioURing.sendBatches))
            writer.key("sends")
            writer.integer(Int(clamping: ioURing.sends))
            writer.endObject()
            writer.key("memory")
            writer.beginObject()
            writer.key("resident_bytes")
            writer.integer(resident)
            writer.key("allocated_bytes")
            writer.integer(allocator.used + allocator.mapped)
            writer.key("allocator_free_bytes")
            writer.integer(allocator.free)
            writer.endObject()
            writer.key("last_save")
            if let last = status.lastSave {
                writer.beginObject()
                writer.key("doc")
                writer.string(last.document)
                writer.key("at")
                Self.withTimestamp(last.at) { writer.plainString($0) }
                writer.endObject()
            } else {
                writer.null()
            }
            writer.key("last_failure")
            if let failure = status.lastFailure { Self.describe(failure, into: &writer) } else { writer.null() }
            writer.key("root_gone_since")
            if let gone = status.rootGoneSince {
                Self.withTimestamp(gone) { writer.plainString($0) }
            } else {
                writer.null()
            }
            writer.key("ignore")
            writer.beginObject()
            writer.key("patterns")
            writer.integer(ignore.patterns)
            writer.key("files")
            Self.write(ignore.files, into: &writer)
            writer.key("ignored_paths")
            writer.integer(ignore.ignoredPaths)
            writer.endObject()
            writer.key("journal")
            Self.describe(journal, mode: mode, into: &writer)
            writer.key("watch")
            if let watch {
                writer.beginObject()
                writer.key("watched_directories")
                writer.integer(watch.watchedDirectories)
                writer.key("polled_directories")
                writer.integer(watch.polledDirectories)
                writer.key("mode")
                writer.string(watch.mode.rawValue)
                writer.key("polled_by_choice")
                writer.integer(watch.polledByChoice)
                writer.key("unwatched")
                Self.write(watch.unwatched, into: &writer)
                writer.key("reloads")
                writer.integer(watch.reloads)
                writer.key("conflicts")
                writer.integer(watch.conflicts)
                writer.key("overflows")
                writer.integer(watch.overflows)
                writer.endObject()
            } else {
                writer.null()
            }
        }
    }

    /// An array of strings.
    static func write(_ strings: some Sequence<String>, into writer: inout JSONWriter) {
        writer.beginArray()
        for string in strings { writer.string(string) }
        writer.endArray()
    }

    private func get(
        id: LineBytes?, _ path: String, _ query: ControlRequest.Query, store: isolated DocumentStore
    ) throws {
        let query: DocumentQuery =
            switch query {
            case .pointer(let pointer): .jsonPointer(pointer)
            case .member(let member): .member(member)
            case .members: .members
            case .contents: .contents
            }
        // Read first: it opens a document not open yet, as every command does on first use.
        let result = try store.read(path, query)
        let info = try store.info(path)
        sendSuccess(id) { writer in
            writer.key("doc")
            writer.string(path)
            writer.key("type")
            writer.string(info.contentType.identifier)
            switch result {
            case .text(let text):
                writer.key("text")
                writer.string(text)
            case .json(let value):
                writer.key("value")
                writer.value(value)
            case .data(let data):
                if let text = String(data: data, encoding: .utf8) {
                    writer.key("text")
                    writer.string(text)
                } else {
                    writer.key("base64")
                    writer.string(data.base64EncodedString())
                }
            case .members(let members):
                writer.key("members")
                Self.write(members, into: &writer)
            }
        }
    }

    private func subscribe(id: LineBytes?, docs: Checked<[String]?>, events: Checked<[String]?>) throws {
        // By the names' bytes, as the store tells documents apart (``PathKey``).
        let documents = try docs.get().map { Set($0.map { PathKey($0) }) }
        let kinds =
            try events.get().map(Set.init) ?? [
                "saved", "save-failed", "changed-on-disk", "conflict", "recreated", "renamed",
            ]
        let known: Set<String> = [
            "saved", "save-failed", "changed-on-disk", "conflict", "recreated", "renamed", "closed",
        ]
        if let unknown = kinds.first(where: { !known.contains($0) }) {
            throw RequestError(
                .badRequest, "unknown event \"\(unknown)\"; events: \(known.sorted().joined(separator: ", "))")
        }
        let store = store
        let connection = connection
        // On the loop, as the session is: each event is written in the pass after the
        // store's change, before any later request is read, with no thread in between.
        let task = Task(executorPreference: store.taskExecutor) {
            for await event in await store.events() {
                guard Self.isWanted(event, kinds: kinds, documents: documents) else { continue }
                connection.send { Self.writeEvent(event, into: &$0) }
                if connection.isBroken { return }
            }
        }
        subscription.withLock {
            $0?.cancel()
            $0 = task
        }
        sendSuccess(id) { writer in
            writer.key("events")
            Self.write(kinds.sorted(), into: &writer)
            writer.key("docs")
            if let documents { Self.write(documents.map(\.path).sorted(), into: &writer) } else { writer.null() }
        }
    }

    /// Whether a subscription to `kinds` of events about `documents` (all, when `nil`) sends `event`.
    static func isWanted(_ event: StoreEvent, kinds: Set<String>, documents: Set<PathKey>?) -> Bool {
        switch event {
        case .saved(let document, _, _):
            kinds.contains("saved") && documents?.contains(PathKey(document)) ?? true
        case .saveFailed(let failure):
            kinds.contains("save-failed") && documents?.contains(PathKey(failure.document)) ?? true
        case .changedOnDisk(let document):
            kinds.contains("changed-on-disk") && documents?.contains(PathKey(document)) ?? true
        case .conflict(let document, _, _):
            kinds.contains("conflict") && documents?.contains(PathKey(document)) ?? true
        case .renamed(let document, let target):
            kinds.contains("renamed")
                && documents.map { $0.contains(PathKey(document)) || $0.contains(PathKey(target)) } ?? true
        case .recreated(let document):
            kinds.contains("recreated") && documents?.contains(PathKey(document)) ?? true
        case .closed(let document):
            kinds.contains("closed") && documents?.contains(PathKey(document)) ?? true
        default:
            false
        }
    }

    /// The event's line (see docs/PROTOCOL.md, `subscribe`); nothing for events no subscription sends.
    static func writeEvent(_ event: StoreEvent, into writer: inout JSONWriter) {
        func begin(_ name: String, _ document: String) {
            writer.beginObject()
            writer.key("event")
            writer.string(name)
            writer.key("doc")
            writer.string(document)
        }
        switch event {
        case .saved(let document, let bytes, let duration):
            begin("saved", document)
            writer.key("bytes")
            writer.integer(bytes)
            writer.key("duration_ms")
            writer.number(Double(duration.microseconds) / 1000)
        case .saveFailed(let failure):
            describe(failure, event: "save-failed", into: &writer)
            return
        case .changedOnDisk(let document):
            begin("changed-on-disk", document)
        case .conflict(let document, let copy, let copyHolds):
            begin("conflict", document)
            writer.key("copy")
            writer.string(copy)
            writer.key("copy_holds")
            writer.string(copyHolds.rawValue)
        case .renamed(let document, let target):
            begin("renamed", document)
            writer.key("to")
            writer.string(target)
        case .recreated(let document):
            begin("recreated", document)
        case .closed(let document):
            begin("closed", document)
        default:
            return
        }
        writer.endObject()
    }

    // MARK: Describing

    /// `2026-11-29T18:11:15.662Z` (UTC, milliseconds).
    static func timestamp(_ date: Date) -> String {
        withTimestamp(date) { String(decoding: $0, as: UTF8.self) }
    }

    /// Calls `body` with the bytes of `date`'s timestamp (see ``EditReply/formatTimestamp(_:into:)``).
    static func withTimestamp<R>(_ date: Date, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 24) { buffer in
            let count = EditReply.formatTimestamp(date, into: buffer.baseAddress!)
            return body(UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// A document's description, written straight to bytes (the hot path of every edit).
    static func describe(_ info: DocumentInfo, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("doc")
        writer.string(info.path)
        writer.key("type")
        writer.string(info.contentType.identifier)
        writer.key("state")
        writer.string(info.state.name)
        writer.key("changes")
        writer.integer(info.changeCount)
        writer.key("saved_changes")
        writer.integer(info.savedChangeCount)
        writer.key("saves")
        writer.integer(info.saves)
        writer.key("last_saved")
        if let saved = info.lastSaved {
            withTimestamp(saved) { writer.plainString($0) }
        } else {
            writer.null()
        }
        switch info.state {
        case .scheduled(let at):
            writer.key("save_at")
            withTimestamp(at) { writer.plainString($0) }
        case .failed(let failure):
            writer.key("failure")
            describe(failure, into: &writer)
        default: break
        }
        writer.endObject()
    }

    /// `{"id": …, "ok": true` (the reply's own fields follow).
    static func beginSuccess(id: LineBytes?, into writer: inout JSONWriter) {
        beginReply(id: id, ok: true, into: &writer)
    }

    /// `{"id": …, "ok": …` (the id only when given).
    private static func beginReply(id: LineBytes?, ok: Bool, into writer: inout JSONWriter) {
        writer.beginObject()
        if let id {
            writer.key("id")
            id.withBytes { writer.json($0) }
        }
        writer.key("ok")
        writer.bool(ok)
    }

    /// `{"id": …, "ok": true, "document": {…}}`, written into `writer`.
    static func writeDocumentReply(id: LineBytes?, _ info: DocumentInfo, into writer: inout JSONWriter) {
        beginSuccess(id: id, into: &writer)
        writer.key("document")
        describe(info, into: &writer)
        writer.endObject()
    }

    /// `status`'s `journal` object (see docs/PROTOCOL.md).
    static func describe(_ journal: JournalSummary?, mode: JournalMode, into writer: inout JSONWriter) {
        writer.beginObject()
        defer { writer.endObject() }
        writer.key("mode")
        guard let journal else {
            writer.string(mode.rawValue)
            return
        }
        writer.string(journal.mode)
        writer.key("directory")
        writer.string(journal.directory)
        writer.key("bytes")
        writer.integer(journal.bytes)
        writer.key("segments")
        writer.integer(journal.segments)
        writer.key("spare_segments")
        writer.integer(journal.spareSegments)
        writer.key("memory_bytes")
        writer.integer(journal.memoryBytes)
        writer.key("unsaved_records")
        writer.integer(journal.unsavedRecords)
        writer.key("written_lsn")
        writer.integer(Int(clamping: journal.writtenThrough))
        writer.key("durable_lsn")
        writer.integer(Int(clamping: journal.durableThrough))
        writer.key("syncs")
        writer.integer(journal.syncs)
        writer.key("last_sync_ms_ago")
        if let ago = journal.lastSyncAgo { writer.integer(Int(ago.microseconds / 1000)) } else { writer.null() }
        writer.key("failure")
        if let failure = journal.failure { writer.string(failure) } else { writer.null() }
        writer.key("unjournalled_edits")
        writer.integer(journal.unjournalledEdits)
        writer.key("unjournalled_types")
        write(journal.unjournalledTypes, into: &writer)
        writer.key("last_replay")
        guard let last = journal.lastReplay else {
            writer.null()
            return
        }
        writer.beginObject()
        writer.key("edits")
        writer.integer(last.edits)
        writer.key("documents")
        writer.integer(last.documents)
        writer.key("records")
        writer.integer(last.records)
        writer.key("duration_ms")
        writer.number((Double(last.duration.microseconds) / 1000 * 10).rounded() / 10)
        writer.key("conflicts")
        write(last.conflicts, into: &writer)
        writer.key("recreated")
        write(last.recreated, into: &writer)
        writer.key("unapplied")
        write(last.unapplied, into: &writer)
        writer.key("problems")
        write(last.problems, into: &writer)
        writer.endObject()
    }

    /// A save failure's description (`failure` in a document's, `last_failure`, the
    /// `save-failed` event with `event` last).
    static func describe(_ failure: SaveFailure, event: String? = nil, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("doc")
        writer.string(failure.document)
        writer.key("operation")
        writer.string(failure.operation)
        writer.key("path")
        writer.string(failure.path)
        writer.key("errno")
        if let errno = failure.errno { writer.string(errno.name) } else { writer.null() }
        writer.key("message")
        writer.string(failure.message)
        writer.key("attempts")
        writer.integer(failure.attempts)
        writer.key("failed_at")
        withTimestamp(failure.failedAt) { writer.plainString($0) }
        writer.key("retry_at")
        withTimestamp(failure.retryAt) { writer.plainString($0) }
        if let event {
            writer.key("event")
            writer.string(event)
        }
        writer.endObject()
    }
}

extension Connection {
    /// Queues an error reply without an id (a line that was not read, a refused connection).
    func sendError(_ code: ControlProtocol.ErrorCode, _ message: String) {
        send { ControlSession.writeError(id: nil, code: code, message: message, into: &$0) }
    }
}

/// A connection's running exports, by their request's `id` (several may share one: a
/// `cancel` of that id cancels them all), each under a token of its own, so that one
/// ending takes only itself off the list.
struct RunningExports {
    private var next: UInt64 = 0
    private var byKey: [String: [UInt64: Task<Void, Never>?]] = [:]

    /// Lists an export about to start under `key`; returns its token.
    mutating func add(_ key: String) -> UInt64 {
        next += 1
        byKey[key, default: [:]][next] = .some(nil)
        return next
    }

    /// Gives the listed export its task (nothing, if it has ended already).
    mutating func set(_ key: String, _ token: UInt64, _ task: Task<Void, Never>) {
        guard byKey[key]?[token] != nil else { return }
        byKey[key]![token] = task
    }

    mutating func remove(_ key: String, _ token: UInt64) {
        byKey[key]?[token] = nil
        if byKey[key]?.isEmpty == true { byKey[key] = nil }
    }

    func running(_ key: String) -> [Task<Void, Never>] { byKey[key]?.values.compactMap { $0 } ?? [] }

    var all: [Task<Void, Never>] { byKey.values.flatMap { $0.values.compactMap { $0 } } }
}
