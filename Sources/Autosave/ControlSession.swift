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
    private let exports = Lock<[String: Task<Void, Never>]>([:])
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
        let running = exports.withLock { Array($0.values) }
        let events = subscription.withLock { task in
            defer { task = nil }
            return task
        }
        for task in running { task.cancel() }
        events?.cancel()
        for task in running { await task.value }
        await events?.value
    }

    /// The request on `line`, or `nil` after answering a line that is not a JSON object.
    private func parse(_ line: [UInt8]) -> JSONValue? {
        let request: JSONValue
        do { request = try JSONValue(parsing: line) } catch {
            connection.send(
                ControlProtocol.errorReply(id: nil, code: .badRequest, message: "the request is not JSON: \(error)"))
            return nil
        }
        guard case .object(let members) = request else {
            connection.send(
                ControlProtocol.errorReply(id: nil, code: .badRequest, message: "a request must be a JSON object"))
            return nil
        }
        // A field given twice is ambiguous (JSON parsers disagree on which one counts).
        if members.count > 1 {
            var seen = Set<String>()
            for member in members where !seen.insert(member.key).inserted {
                let id = members.filter { $0.key == "id" }.count == 1 ? request["id"] : nil
                connection.send(
                    ControlProtocol.errorReply(
                        id: id, code: .badRequest, message: "field \"\(member.key)\" is given more than once"))
                return nil
            }
        }
        return request
    }

    /// The commands answered without waiting for anything: edits, opening, reading, listing.
    static let immediateCommands: Set<String> = [
        "set", "append", "replace", "patch", "put-member", "remove-member", "open", "create", "revert", "list", "get",
    ]

    /// Answers the request on `line` at once, on the store's thread, when its command
    /// needs no waiting (``immediateCommands``); otherwise returns the parsed request,
    /// to be handled by ``handle(_:store:)``.
    func handleNow(
        _ line: UnsafeRawBufferPointer, memo: inout EditMemo, store: isolated DocumentStore
    ) -> JSONValue? {
        // The most frequent requests, read without a value tree: in place when their id
        // and path are plain, else with strings made for them.
        if let edit = EditRequest.scanRaw(line) {
            applyEdit(edit, memo: &memo, store: store)
            return nil
        }
        guard let request = parse(Array(line)) else { return nil }
        guard let command = request["cmd"]?.stringValue, Self.immediateCommands.contains(command) else {
            return request
        }
        answerNow(command, request, store: store)
        return nil
    }

    /// What a connection keeps of the document its last plain edit named, so that the
    /// next edit of the same document — the usual case — needs no new path string, no
    /// check of it, and no new reply prefix. Kept by ``ConnectionReader``.
    struct EditMemo {
        /// The `doc` of the request as sent.
        var document: [UInt8] = []
        /// `document` once checked (``DocumentPath/validate(_:)``).
        var path = ""
        var isJSON = false
        /// The type `prefix` was written for.
        var type: UTType?
        /// ``EditReply/documentPrefix(path:type:)``.
        var prefix: [UInt8] = []
        /// The seconds this connection's replies formatted last (kept across documents).
        var timestamps = EditReply.TimestampCache()
    }

    private func applyEdit(_ edit: consuming EditRequest.Raw, memo: inout EditMemo, store: isolated DocumentStore) {
        // Taken apart first: the text moves into the edit without a copy of the request.
        let (command, id, document, text) = (edit.command, edit.id, edit.document, edit.text)
        if !memo.document.withUnsafeBytes({ $0.elementsEqual(document) }) {
            let raw = edit.documentPath
            let path: String
            if store.isOpen(raw) {
                // A path the store holds a document at was checked when it was opened.
                path = raw
            } else {
                do {
                    path = try DocumentPath.validate(raw)
                } catch {
                    connection.send(Self.failure(EditRequest.Raw.idValue(id), error))
                    return
                }
            }
            // The memo's buffers are reused: another document costs no allocation here.
            memo.document.removeAll(keepingCapacity: true)
            memo.document.append(contentsOf: document)
            memo.path = path
            memo.isJSON = Self.isJSONPath(path)
            memo.type = nil
        }
        let documentEdit: DocumentEdit
        switch command {
        case .set: documentEdit = memo.isJSON ? .setJSON(text) : .setText(text)
        case .append: documentEdit = .append(text)
        }
        let outcome: EditOutcome
        do {
            outcome = try store.apply(
                documentEdit, toValid: memo.path, create: command == .set, unopened: server, knownType: memo.type)
        } catch {
            connection.send(Self.failure(EditRequest.Raw.idValue(id), error))
            return
        }
        if store.replyNeedsSync { connection.require(durable: store.lastJournalLSN) }
        if let type = outcome.contentType {
            memo.type = type
            memo.prefix = EditReply.documentPrefix(path: memo.path, type: type)
        }
        memo.prefix.withUnsafeBytes { prefix in
            EditReply.send(idText: id, prefix: prefix, outcome, to: connection, timestamps: &memo.timestamps)
        }
    }

    /// `"durable": true` on a request: its reply waits until the journal has synced every
    /// record written so far (its own edit's included). Returns `nil` after answering a
    /// request whose flag is bad, or that asks for durability without a journal.
    private func durableFlag(_ request: JSONValue, store: isolated DocumentStore) -> Bool? {
        let durable: Bool
        do { durable = try flag(request, "durable") } catch {
            connection.send(Self.failure(request["id"], error))
            return nil
        }
        if durable, store.journal == nil {
            connection.send(
                Self.failure(
                    request["id"],
                    RequestError(
                        .badRequest,
                        "\"durable\": true needs the edit journal, and it is off ([Journal] Mode=off); nothing was done"
                    )))
            return nil
        }
        return durable
    }

    /// Answers a request whose command is one of ``immediateCommands``.
    private func answerNow(_ command: String, _ request: JSONValue, store: isolated DocumentStore) {
        guard let durable = durableFlag(request, store: store) else { return }
        answerNow(command, request, store: store, replyNeedsSync: store.replyNeedsSync)
        if durable { store.requireDurable(connection) }
    }

    private func answerNow(
        _ command: String, _ request: JSONValue, store: isolated DocumentStore, replyNeedsSync: Bool
    ) {
        defer { if replyNeedsSync { connection.require(durable: store.lastJournalLSN) } }
        let id = request["id"]
        switch command {
        case "list":
            connection.send(json: Self.listReply(id: id, store.list()))
        case "get":
            let reply: JSONValue
            do { reply = Self.success(id, try get(request, store: store)) } catch { reply = Self.failure(id, error) }
            connection.send(reply)
        default:
            do {
                let info = try immediateDocumentCommand(command, request, store: store)
                connection.send { Self.writeDocumentReply(id: id, info, into: &$0) }
            } catch {
                connection.send(Self.failure(id, error))
            }
        }
    }

    /// Applies an edit from a request. A document the store holds needs no look at the
    /// disk (the store checks the path's form; saves refuse symbolic links); any other is
    /// checked beneath the root like every request's.
    private func apply(
        _ edit: DocumentEdit, to path: String, create: Bool = false, store: isolated DocumentStore
    ) throws -> DocumentInfo {
        let path = try DocumentPath.validate(path)
        return try store.apply(edit, toValid: path, create: create, unopened: server).info(path: path)
    }

    /// Whether `path` ends in `.json`, in any case: `set` with `text` parses such a document's text as JSON.
    static func isJSONPath(_ path: String) -> Bool {
        var path = path
        return path.withUTF8 { bytes in
            guard bytes.count >= 5 else { return false }
            let suffix = UnsafeBufferPointer(rebasing: bytes[(bytes.count - 5)...])
            return suffix[0] == UInt8(ascii: ".") && suffix[1] | 0x20 == UInt8(ascii: "j")
                && suffix[2] | 0x20 == UInt8(ascii: "s") && suffix[3] | 0x20 == UInt8(ascii: "o")
                && suffix[4] | 0x20 == UInt8(ascii: "n")
        }
    }

    /// Handles one request line, whatever its command.
    func handle(_ line: [UInt8], store: isolated DocumentStore) async {
        guard let request = parse(line) else { return }
        await handle(request, store: store)
    }

    /// Handles one parsed request (a JSON object), whatever its command.
    func handle(_ request: JSONValue, store: isolated DocumentStore) async {
        let id = request["id"]
        guard let command = request["cmd"]?.stringValue else {
            connection.send(
                ControlProtocol.errorReply(id: id, code: .badRequest, message: "the request has no \"cmd\" string"))
            return
        }
        if Self.immediateCommands.contains(command) {
            answerNow(command, request, store: store)
            return
        }
        if command == "export" {
            let key = id.map { $0.serialized(pretty: false) } ?? UUID().uuidString
            let task = Task {
                let reply: JSONValue
                do { reply = Self.success(id, try await self.export(request, id: id)) } catch {
                    reply = Self.failure(id, error)
                }
                self.connection.send(reply)
                _ = self.exports.withLock { $0.removeValue(forKey: key) }
            }
            exports.withLock { $0[key] = task }
            return
        }
        guard let durable = durableFlag(request, store: store) else { return }
        defer { if durable { store.requireDurable(connection) } }
        if command == "save" {
            do {
                let info = try await save(request, store: store)
                connection.send { Self.writeDocumentReply(id: id, info, into: &$0) }
            } catch {
                connection.send(Self.failure(id, error))
            }
            return
        }
        // Inline, not through a closure: a closure would run off the caller's (the store's) thread.
        let reply: JSONValue
        do { reply = Self.success(id, try await run(command, request)) } catch { reply = Self.failure(id, error) }
        connection.send(reply)
    }

    static func success(_ id: JSONValue?, _ fields: [(key: String, value: JSONValue)]) -> JSONValue {
        var members: [(key: String, value: JSONValue)] = []
        if let id { members.append(("id", id)) }
        members.append(("ok", true))
        return .object(members + fields)
    }

    static func failure(_ id: JSONValue?, _ error: any Error) -> JSONValue {
        switch error {
        case let error as RequestError:
            return ControlProtocol.errorReply(id: id, code: error.code, message: error.message)
        case let error as StoreError:
            let mapped = RequestError(error)
            return ControlProtocol.errorReply(id: id, code: mapped.code, message: mapped.message)
        case is CancellationError:
            return ControlProtocol.errorReply(id: id, code: .cancelled, message: "cancelled")
        default:
            return ControlProtocol.errorReply(id: id, code: .internalError, message: "\(error)")
        }
    }

    // MARK: Fields

    func string(_ request: JSONValue, _ key: String) throws -> String {
        guard let value = request[key] else { throw RequestError(.badRequest, "missing field \"\(key)\"") }
        guard let string = value.stringValue else {
            throw RequestError(.badRequest, "field \"\(key)\" must be a string")
        }
        return string
    }

    func optionalString(_ request: JSONValue, _ key: String) throws -> String? {
        guard let value = request[key], !value.isNull else { return nil }
        guard let string = value.stringValue else {
            throw RequestError(.badRequest, "field \"\(key)\" must be a string")
        }
        return string
    }

    func integer(_ request: JSONValue, _ key: String) throws -> Int {
        guard let value = request[key] else { throw RequestError(.badRequest, "missing field \"\(key)\"") }
        guard let int = value.intValue else {
            throw RequestError(.badRequest, "field \"\(key)\" must be a whole number")
        }
        return int
    }

    func flag(_ request: JSONValue, _ key: String) throws -> Bool {
        guard let value = request[key], !value.isNull else { return false }
        guard let bool = value.boolValue else {
            throw RequestError(.badRequest, "field \"\(key)\" must be true or false")
        }
        return bool
    }

    func strings(_ request: JSONValue, _ key: String) throws -> [String]? {
        guard let value = request[key], !value.isNull else { return nil }
        guard let array = value.arrayValue, let strings = Optional(array.compactMap(\.stringValue)),
            strings.count == array.count
        else { throw RequestError(.badRequest, "field \"\(key)\" must be an array of strings") }
        return strings
    }

    /// The document path of a request, checked to stay inside the root.
    func document(_ request: JSONValue) throws -> String {
        let path = try string(request, "doc")
        try server.checkBeneathRoot(path)
        return path
    }

    /// Bytes given as `text` (UTF-8) or `base64`.
    func bytes(_ request: JSONValue) throws -> Data {
        if let text = try optionalString(request, "text") { return Data(text.utf8) }
        if let encoded = try optionalString(request, "base64") {
            guard let data = Data(base64Encoded: encoded) else {
                throw RequestError(.badRequest, "field \"base64\" is not valid base64")
            }
            return data
        }
        throw RequestError(.badRequest, "give the contents as \"text\" or \"base64\"")
    }

    /// `save`, answered once the save has started or, with `wait`, once it is durable.
    private func save(_ request: JSONValue, store: isolated DocumentStore) async throws -> DocumentInfo {
        // A document the store holds needs no look at the disk (as for edits); only one
        // it does not hold is checked beneath the root, for the error to name.
        let path = try string(request, "doc")
        if !store.isOpen(path) { try server.checkBeneathRoot(path) }
        try await store.save(path, wait: try flag(request, "wait"))
        return try store.info(path)
    }

    /// The commands that answer with one document's description and need no waiting.
    private func immediateDocumentCommand(
        _ command: String, _ request: JSONValue, store: isolated DocumentStore
    ) throws -> DocumentInfo {
        switch command {
        case "open":
            return try store.open(try document(request))
        case "create":
            return try store.create(try document(request))
        case "revert":
            return try store.revert(try document(request))
        case "set":
            let path = try string(request, "doc")
            let edit: DocumentEdit
            if let json = request["json"] {
                edit = .setJSON(json.serialized() + "\n")
            } else if let text = try optionalString(request, "text") {
                edit = Self.isJSONPath(path) ? .setJSON(text) : .setText(text)
            } else {
                edit = .setData(try bytes(request))
            }
            return try apply(edit, to: path, create: true, store: store)
        case "append":
            let path = try string(request, "doc")
            return try apply(.append(try string(request, "text")), to: path, store: store)
        case "replace":
            let path = try string(request, "doc")
            let edit = DocumentEdit.replace(
                offset: try integer(request, "offset"), length: try integer(request, "length"),
                with: try string(request, "text"))
            return try apply(edit, to: path, store: store)
        case "patch":
            let path = try string(request, "doc")
            guard let patch = request["patch"] else { throw RequestError(.badRequest, "missing field \"patch\"") }
            let text = patch.stringValue ?? patch.serialized()
            return try apply(.mergePatch(text), to: path, store: store)
        case "put-member":
            let path = try string(request, "doc")
            let member = try string(request, "member")
            return try apply(.putMember(member, try bytes(request)), to: path, store: store)
        case "remove-member":
            let path = try string(request, "doc")
            return try apply(.removeMember(try string(request, "member")), to: path, store: store)
        default:
            throw RequestError(.unknownCommand, "unknown document command \"\(command)\"")
        }
    }

    // MARK: Commands

    private func run(
        _ command: String, _ request: JSONValue, isolation: isolated (any Actor)? = #isolation
    ) async throws -> [(key: String, value: JSONValue)] {
        switch command {
        case "status":
            return try await status()
        case "metrics":
            return [("text", .string(await Metrics.render(store: store, connections: server.connectionCount)))]
        case "save-all":
            let wait = try flag(request, "wait")
            try await store.saveAll(wait: wait)
            return [("unsaved", JSONValue(await store.status().unsaved))]
        case "close":
            let path = try document(request)
            try await store.close(path)
            return [("doc", .string(path))]
        case "cancel":
            guard let target = request["target"] else {
                throw RequestError(.badRequest, "missing field \"target\" (the id of an export)")
            }
            let key = target.serialized(pretty: false)
            guard let task = exports.withLock({ $0[key] }) else {
                throw RequestError(.notFound, "no running export has id \(key)")
            }
            task.cancel()
            return [("cancelled", target)]
        case "subscribe":
            return try subscribe(request)
        case "sync":
            await store.sync()
            return [("synced", true)]
        case "reload":
            switch await server.reload() {
            case .success(let message): return [("message", .string(message))]
            case .failure(let errors):
                throw RequestError(.badRequest, "the configuration was not reloaded: \(errors.description)")
            }
        default:
            throw RequestError(
                .unknownCommand,
                "unknown command \"\(command)\"; commands: \(ControlProtocol.commands.joined(separator: ", "))")
        }
    }

    private func status(isolation: isolated (any Actor)? = #isolation) async throws -> [(key: String, value: JSONValue)]
    {
        let status = await store.status()
        var fields: [(key: String, value: JSONValue)] = [
            ("version", .string(Daemon.version)),
            ("root", .string(store.root)),
            ("documents", JSONValue(status.documents)),
            ("unsaved", JSONValue(status.unsaved)),
            ("saving", JSONValue(status.saving)),
            ("failed", JSONValue(status.failed)),
            ("saves", JSONValue(status.saves)),
            ("uptime_seconds", JSONValue(Date().timeIntervalSince(status.startedAt).rounded())),
            ("connections", JSONValue(server.connectionCount)),
        ]
        if let last = status.lastSave {
            fields.append(("last_save", ["doc": .string(last.document), "at": .string(Self.timestamp(last.at))]))
        } else {
            fields.append(("last_save", .null))
        }
        fields.append(("last_failure", status.lastFailure.map(Self.describe) ?? .null))
        fields.append(("root_gone_since", status.rootGoneSince.map { .string(Self.timestamp($0)) } ?? .null))
        let ignore = await store.ignoreSummary
        fields.append(
            (
                "ignore",
                [
                    "patterns": JSONValue(ignore.patterns), "files": .array(ignore.files.map { .string($0) }),
                    "ignored_paths": JSONValue(ignore.ignoredPaths),
                ]
            ))
        fields.append(
            ("journal", Self.describe(await store.journalSummary, mode: await store.configuration.journalMode)))
        if let watch = await store.watchSummary {
            fields.append(
                (
                    "watch",
                    [
                        "watched_directories": JSONValue(watch.watchedDirectories),
                        "polled_directories": JSONValue(watch.polledDirectories),
                        "mode": .string(watch.mode.rawValue), "polled_by_choice": JSONValue(watch.polledByChoice),
                        "unwatched": .array(watch.unwatched.map { .string($0) }),
                        "reloads": JSONValue(watch.reloads), "conflicts": JSONValue(watch.conflicts),
                        "overflows": JSONValue(watch.overflows),
                    ]
                ))
        } else {
            fields.append(("watch", .null))
        }
        return fields
    }

    private func get(_ request: JSONValue, store: isolated DocumentStore) throws -> [(key: String, value: JSONValue)] {
        let path = try document(request)
        let query: DocumentQuery
        if let pointer = try optionalString(request, "pointer") {
            query = .jsonPointer(pointer)
        } else if let member = try optionalString(request, "member") {
            query = .member(member)
        } else if try flag(request, "members") {
            query = .members
        } else {
            query = .contents
        }
        // Read first: it opens a document not open yet, as every command does on first use.
        let result = try store.read(path, query)
        let info = try store.info(path)
        var fields: [(key: String, value: JSONValue)] = [
            ("doc", .string(path)), ("type", .string(info.contentType.identifier)),
        ]
        switch result {
        case .text(let text):
            fields.append(("text", .string(text)))
        case .json(let value):
            fields.append(("value", value))
        case .data(let data):
            if let text = String(data: data, encoding: .utf8) {
                fields.append(("text", .string(text)))
            } else {
                fields.append(("base64", .string(data.base64EncodedString())))
            }
        case .members(let members):
            fields.append(("members", .array(members.map { .string($0) })))
        }
        return fields
    }

    private func subscribe(_ request: JSONValue) throws -> [(key: String, value: JSONValue)] {
        let documents = try strings(request, "docs").map(Set.init)
        let kinds =
            try strings(request, "events").map(Set.init) ?? [
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
        let task = Task {
            for await event in await store.events() {
                guard let message = Self.eventMessage(event, kinds: kinds, documents: documents) else { continue }
                connection.send(message)
                if connection.isBroken { return }
            }
        }
        subscription.withLock {
            $0?.cancel()
            $0 = task
        }
        return [
            ("events", .array(kinds.sorted().map { .string($0) })),
            ("docs", documents.map { .array($0.sorted().map { .string($0) }) } ?? .null),
        ]
    }

    static func eventMessage(_ event: StoreEvent, kinds: Set<String>, documents: Set<String>?) -> JSONValue? {
        switch event {
        case .saved(let document, let bytes, let duration):
            guard kinds.contains("saved"), documents?.contains(document) ?? true else { return nil }
            return [
                "event": "saved", "doc": .string(document), "bytes": JSONValue(bytes),
                "duration_ms": JSONValue(Double(duration.microseconds) / 1000),
            ]
        case .saveFailed(let failure):
            guard kinds.contains("save-failed"), documents?.contains(failure.document) ?? true else { return nil }
            return describe(failure).setting("event", "save-failed")
        case .changedOnDisk(let document):
            guard kinds.contains("changed-on-disk"), documents?.contains(document) ?? true else { return nil }
            return ["event": "changed-on-disk", "doc": .string(document)]
        case .conflict(let document, let copy, let copyHolds):
            guard kinds.contains("conflict"), documents?.contains(document) ?? true else { return nil }
            return [
                "event": "conflict", "doc": .string(document), "copy": .string(copy),
                "copy_holds": .string(copyHolds.rawValue),
            ]
        case .renamed(let document, let target):
            guard kinds.contains("renamed"), documents.map({ $0.contains(document) || $0.contains(target) }) ?? true
            else { return nil }
            return ["event": "renamed", "doc": .string(document), "to": .string(target)]
        case .recreated(let document):
            guard kinds.contains("recreated"), documents?.contains(document) ?? true else { return nil }
            return ["event": "recreated", "doc": .string(document)]
        case .closed(let document):
            guard kinds.contains("closed"), documents?.contains(document) ?? true else { return nil }
            return ["event": "closed", "doc": .string(document)]
        default:
            return nil
        }
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
            writer.value(describe(failure))
        default: break
        }
        writer.endObject()
    }

    /// A writer with `{"id": …, "ok": true` written (the reply's own fields follow), as ``success(_:_:)`` begins.
    private static func successWriter(id: JSONValue?, capacity: Int = 256) -> JSONWriter {
        var writer = JSONWriter(capacity: capacity)
        beginSuccess(id: id, into: &writer)
        return writer
    }

    private static func beginSuccess(id: JSONValue?, into writer: inout JSONWriter) {
        writer.beginObject()
        if let id {
            writer.key("id")
            writer.value(id)
        }
        writer.key("ok")
        writer.bool(true)
    }

    /// `{"id": …, "ok": true, "documents": [{…}, …]}`.
    static func listReply(id: JSONValue?, _ documents: [DocumentInfo]) -> [UInt8] {
        var writer = successWriter(id: id, capacity: 64 + 256 * documents.count)
        writer.key("documents")
        writer.beginArray()
        for info in documents { describe(info, into: &writer) }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }

    /// `{"id": …, "ok": true, "document": {…}}`, written into `writer`.
    static func writeDocumentReply(id: JSONValue?, _ info: DocumentInfo, into writer: inout JSONWriter) {
        beginSuccess(id: id, into: &writer)
        writer.key("document")
        describe(info, into: &writer)
        writer.endObject()
    }

    /// `status`'s `journal` object (see docs/PROTOCOL.md).
    static func describe(_ journal: JournalSummary?, mode: JournalMode) -> JSONValue {
        guard let journal else { return ["mode": .string(mode.rawValue)] }
        var replay: JSONValue = .null
        if let last = journal.lastReplay {
            replay = [
                "edits": JSONValue(last.edits), "documents": JSONValue(last.documents),
                "records": JSONValue(last.records),
                "duration_ms": JSONValue((Double(last.duration.microseconds) / 1000 * 10).rounded() / 10),
                "conflicts": .array(last.conflicts.map { .string($0) }),
                "unapplied": .array(last.unapplied.map { .string($0) }),
                "problems": .array(last.problems.map { .string($0) }),
            ]
        }
        return [
            "mode": .string(journal.mode), "directory": .string(journal.directory), "bytes": JSONValue(journal.bytes),
            "segments": JSONValue(journal.segments), "unsaved_records": JSONValue(journal.unsavedRecords),
            "written_lsn": JSONValue(Int(clamping: journal.writtenThrough)),
            "durable_lsn": JSONValue(Int(clamping: journal.durableThrough)), "syncs": JSONValue(journal.syncs),
            "last_sync_ms_ago": journal.lastSyncAgo.map { JSONValue(Int($0.microseconds / 1000)) } ?? .null,
            "failure": journal.failure.map { .string($0) } ?? .null,
            "unjournalled_edits": JSONValue(journal.unjournalledEdits),
            "unjournalled_types": .array(journal.unjournalledTypes.map { .string($0) }),
            "last_replay": replay,
        ]
    }

    static func describe(_ failure: SaveFailure) -> JSONValue {
        [
            "doc": .string(failure.document), "operation": .string(failure.operation), "path": .string(failure.path),
            "errno": failure.errno.map { .string($0.name) } ?? .null, "message": .string(failure.message),
            "attempts": JSONValue(failure.attempts), "failed_at": .string(timestamp(failure.failedAt)),
            "retry_at": .string(timestamp(failure.retryAt)),
        ]
    }
}
