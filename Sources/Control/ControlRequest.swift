import Foundation

/// A request's field as the command reads it: its value, or why it cannot be used (a
/// `bad-request`). A command checks its fields in a fixed order, some after looking at
/// the document's path on disk, so each field keeps its own outcome until then.
public typealias Checked<T> = Result<T, FieldError>

/// A field missing, of the wrong type, or with a value the command cannot use (plain
/// data: a request's fields cost no reference counting for their errors).
public struct FieldError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Problem: UInt8, Sendable {
        case missing, notString, notWholeNumber, notTrueOrFalse, notStrings
        /// A whole number beyond what the field holds (a signed 64-bit integer).
        case outOfRange
        /// `base64` that is not base64.
        case invalidBase64
        /// Neither `text` nor `base64`.
        case noContents
        /// `export` without documents.
        case noDocuments
        /// `cancel` without `target`.
        case missingTarget
    }
    public var problem: Problem
    public var field: RequestField

    public init(_ problem: Problem, _ field: RequestField) {
        self.problem = problem
        self.field = field
    }

    /// Whether a number whose value is `value` is whole (one too large for a `Double`,
    /// `1e400`, counts as whole: it is out of any range).
    static func isWhole(_ value: Double) -> Bool { value == value.rounded() }

    /// The `bad-request` message.
    public var message: String {
        switch problem {
        case .missing: "missing field \"\(field)\""
        case .notString: "field \"\(field)\" must be a string"
        case .notWholeNumber: "field \"\(field)\" must be a whole number"
        case .outOfRange:
            "field \"\(field)\" is out of range: a whole number from \(Int.min) to \(Int.max)"
        case .notTrueOrFalse: "field \"\(field)\" must be true or false"
        case .notStrings: "field \"\(field)\" must be an array of strings"
        case .invalidBase64: "field \"base64\" is not valid base64"
        case .noContents: "give the contents as \"text\" or \"base64\""
        case .noDocuments: "field \"docs\" must be a non-empty array of document paths"
        case .missingTarget: "missing field \"target\" (the id of an export)"
        }
    }

    public var description: String { message }

}

/// The fields of requests that commands read.
public enum RequestField: Int, Sendable, CustomStringConvertible {
    case id, cmd, doc, text, json, base64, offset, length, patch, member, members, pointer, wait, durable, target
    case docs, events, to, type

    static let count = 19

    /// The field's name in a request.
    public var name: String {
        switch self {
        case .id: "id"
        case .cmd: "cmd"
        case .doc: "doc"
        case .text: "text"
        case .json: "json"
        case .base64: "base64"
        case .offset: "offset"
        case .length: "length"
        case .patch: "patch"
        case .member: "member"
        case .members: "members"
        case .pointer: "pointer"
        case .wait: "wait"
        case .durable: "durable"
        case .target: "target"
        case .docs: "docs"
        case .events: "events"
        case .to: "to"
        case .type: "type"
        }
    }

    public var description: String { name }
}

/// Bytes of a request line — a slice of the line while it is being answered, or a copy
/// of their own (``owned()``) for a request answered later.
///
/// `@unchecked Sendable`: a borrowed slice is only used while its line is; a request
/// handed to another task is made ``owned()`` first.
public struct LineBytes: @unchecked Sendable, Equatable, CustomDebugStringConvertible {
    // A struct of a slice and an optional copy rather than an enum: a request's bytes
    // are made and dropped with no more than one release.
    private var borrowed: UnsafeRawBufferPointer
    private var storage: [UInt8]?

    /// A slice of a line, valid while the line is.
    public init(borrowing bytes: UnsafeRawBufferPointer) {
        borrowed = bytes
        storage = nil
    }

    public init(_ bytes: [UInt8]) {
        borrowed = UnsafeRawBufferPointer(start: nil, count: 0)
        storage = bytes
    }

    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let storage { return try storage.withUnsafeBytes(body) }
        return try body(borrowed)
    }

    /// A copy that does not depend on the line.
    public func owned() -> LineBytes { storage == nil ? LineBytes(Array(borrowed)) : self }

    public var array: [UInt8] { storage ?? Array(borrowed) }

    /// Whether these are the line's own bytes (not a copy).
    public var isSlice: Bool { storage == nil }

    public static func == (a: LineBytes, b: LineBytes) -> Bool {
        a.withBytes { x in b.withBytes { y in x.elementsEqual(y) } }
    }

    public var debugDescription: String { "LineBytes(\(String(reflecting: String(decoding: array, as: UTF8.self))))" }
}

/// A request's `doc` for `set` and `append`: the path's UTF-8 — a slice of the line
/// when it is written without escapes, else decoded. A connection compares it with its
/// last document's and needs no string for the path when they match.
public struct DocumentName: Sendable, Equatable, CustomDebugStringConvertible {
    public var bytes: LineBytes

    public init(_ bytes: LineBytes) { self.bytes = bytes }
    public init(_ path: String) { bytes = LineBytes(Array(path.utf8)) }

    public var path: String { bytes.withBytes { String(decoding: $0, as: UTF8.self) } }

    public func owned() -> DocumentName { DocumentName(bytes.owned()) }

    public var debugDescription: String { "DocumentName(\(String(reflecting: path)))" }
}

/// One request, decoded: its id, its `durable` flag and its command with the command's
/// fields. Made from the line's bytes by ``RequestDecoder``; ``reference(_:)`` makes the
/// same from the general parser's value, to check the decoder against.
public struct ControlRequest: Sendable, Equatable {
    /// The id's JSON text as replies echo it (compact, as ``JSONValue`` serialises it);
    /// `nil` without an id.
    public var id: LineBytes?
    public var durable: Checked<Bool>
    public var command: Command

    public init(id: LineBytes?, durable: Checked<Bool>, command: Command) {
        self.id = id
        self.durable = durable
        self.command = command
    }

    /// What a `get` asks for.
    public enum Query: Sendable, Equatable {
        case contents
        case pointer(String)
        case member(String)
        case members
    }

    /// What a `set` puts in the document.
    public enum Contents: Sendable, Equatable {
        /// A JSON value (`json`).
        case json(JSONValue)
        case text(String)
        /// Bytes given as `base64`.
        case data(Data)
    }

    /// The commands of docs/PROTOCOL.md, each with its fields.
    public enum Command: Sendable, Equatable {
        case status, list, metrics, sync, reload
        case open(Checked<String>)
        case create(Checked<String>)
        case revert(Checked<String>)
        case close(Checked<String>)
        /// The document, then what is asked (`pointer`, else `member`, else `members`).
        indirect case get(Checked<String>, Checked<Query>)
        case set(Checked<DocumentName>, Checked<Contents>)
        case append(Checked<DocumentName>, Checked<String>)
        indirect case replace(Checked<String>, offset: Checked<Int>, length: Checked<Int>, text: Checked<String>)
        /// The document and the merge patch's JSON text.
        indirect case patch(Checked<String>, Checked<String>)
        indirect case putMember(Checked<String>, member: Checked<String>, Checked<Data>)
        indirect case removeMember(Checked<String>, member: Checked<String>)
        indirect case save(Checked<String>, wait: Checked<Bool>)
        case saveAll(wait: Checked<Bool>)
        indirect case export(docs: Checked<[String]>, to: Checked<String>, type: Checked<String?>)
        /// The target's JSON text (compact).
        case cancel(target: Checked<[UInt8]>)
        indirect case subscribe(docs: Checked<[String]?>, events: Checked<[String]?>)
        /// A `cmd` that names no command.
        case unknown(String)
    }

    /// The commands answered without waiting for anything: edits, opening, reading, listing.
    public var isImmediate: Bool {
        switch command {
        case .set, .append, .replace, .patch, .putMember, .removeMember, .open, .create, .revert, .list, .get: true
        default: false
        }
    }

    /// A copy that does not depend on the line it was read from.
    public func owned() -> ControlRequest {
        var copy = self
        copy.id = id?.owned()
        switch command {
        case .set(let document, let contents): copy.command = .set(document.map { $0.owned() }, contents)
        case .append(let document, let text): copy.command = .append(document.map { $0.owned() }, text)
        default: break
        }
        return copy
    }
}

/// What a request line is: a request, or a line refused before any command is looked at
/// (not JSON, not an object, a field given twice, no `cmd`) with the `bad-request`
/// message and the id to echo, if any.
public enum DecodedLine: Sendable, Equatable {
    case request(ControlRequest)
    case refused(id: LineBytes?, message: String)

    /// A copy that does not depend on the line.
    public func owned() -> DecodedLine {
        switch self {
        case .request(let request): .request(request.owned())
        case .refused(let id, let message): .refused(id: id?.owned(), message: message)
        }
    }
}

// MARK: The reference: the general parser's value, read field by field

extension ControlRequest {
    /// What `line` means, read by the general parser (``JSONValue``) and then field by
    /// field — the meaning ``RequestDecoder`` must give every line.
    public static func reference(_ line: [UInt8]) -> DecodedLine {
        let value: JSONValue
        do { value = try JSONValue(parsing: line) } catch {
            return .refused(id: nil, message: "the request is not JSON: \(error)")
        }
        return reference(value)
    }

    /// What a parsed request line means (see ``reference(_:)-([UInt8])``).
    public static func reference(_ request: JSONValue) -> DecodedLine {
        guard case .object(let members) = request else {
            return .refused(id: nil, message: "a request must be a JSON object")
        }
        let id = request["id"].map { LineBytes($0.serializedBytes()) }
        // A field given twice is ambiguous (JSON parsers disagree on which one counts).
        // Names compared by their bytes, as JSON compares them ("\u00e9" and "e\u0301" are two names).
        var seen = Set<[UInt8]>()
        for member in members where !seen.insert(Array(member.key.utf8)).inserted {
            let unique = members.filter { $0.key == "id" }.count == 1
            return .refused(id: unique ? id : nil, message: "field \"\(member.key)\" is given more than once")
        }
        guard let name = request["cmd"]?.stringValue else {
            return .refused(id: id, message: "the request has no \"cmd\" string")
        }
        let fields = ReferenceFields(request: request)
        let command: Command
        switch name {
        case "status": command = .status
        case "list": command = .list
        case "metrics": command = .metrics
        case "sync": command = .sync
        case "reload": command = .reload
        case "open": command = .open(fields.string(.doc))
        case "create": command = .create(fields.string(.doc))
        case "revert": command = .revert(fields.string(.doc))
        case "close": command = .close(fields.string(.doc))
        case "get":
            let query = Checked<Query> { () throws(FieldError) -> Query in
                if let pointer = try fields.optionalString(.pointer).get() { return .pointer(pointer) }
                if let member = try fields.optionalString(.member).get() { return .member(member) }
                if try fields.flag(.members).get() { return .members }
                return .contents
            }
            command = .get(fields.string(.doc), query)
        case "set":
            let contents = Checked<Contents> { () throws(FieldError) -> Contents in
                if let json = request["json"] { return .json(json) }
                if let text = try fields.optionalString(.text).get() { return .text(text) }
                return .data(try fields.bytes().get())
            }
            command = .set(fields.string(.doc).map(DocumentName.init), contents)
        case "append": command = .append(fields.string(.doc).map(DocumentName.init), fields.string(.text))
        case "replace":
            command = .replace(
                fields.string(.doc), offset: fields.integer(.offset), length: fields.integer(.length),
                text: fields.string(.text))
        case "patch":
            let patch = Checked<String> { () throws(FieldError) -> String in
                guard let patch = request["patch"] else { throw FieldError(.missing, .patch) }
                return patch.stringValue ?? patch.serialized()
            }
            command = .patch(fields.string(.doc), patch)
        case "put-member":
            command = .putMember(fields.string(.doc), member: fields.string(.member), fields.bytes())
        case "remove-member": command = .removeMember(fields.string(.doc), member: fields.string(.member))
        case "save": command = .save(fields.string(.doc), wait: fields.flag(.wait))
        case "save-all": command = .saveAll(wait: fields.flag(.wait))
        case "export":
            let docs = Checked<[String]> { () throws(FieldError) -> [String] in
                guard let paths = try fields.strings(.docs).get(), !paths.isEmpty else {
                    throw FieldError(.noDocuments, .docs)
                }
                return paths
            }
            command = .export(docs: docs, to: fields.string(.to), type: fields.optionalString(.type))
        case "cancel":
            let target = Checked<[UInt8]> { () throws(FieldError) -> [UInt8] in
                guard let target = request["target"] else {
                    throw FieldError(.missingTarget, .target)
                }
                return target.serializedBytes()
            }
            command = .cancel(target: target)
        case "subscribe": command = .subscribe(docs: fields.strings(.docs), events: fields.strings(.events))
        default: command = .unknown(name)
        }
        return .request(ControlRequest(id: id, durable: fields.flag(.durable), command: command))
    }
}

/// A parsed request's fields read as the commands read them.
private struct ReferenceFields {
    let request: JSONValue

    func string(_ key: RequestField) -> Checked<String> {
        guard let value = request[key.name] else { return .failure(FieldError(.missing, key)) }
        guard let string = value.stringValue else { return .failure(FieldError(.notString, key)) }
        return .success(string)
    }

    func optionalString(_ key: RequestField) -> Checked<String?> {
        guard let value = request[key.name], !value.isNull else { return .success(nil) }
        guard let string = value.stringValue else { return .failure(FieldError(.notString, key)) }
        return .success(string)
    }

    func integer(_ key: RequestField) -> Checked<Int> {
        guard let value = request[key.name] else { return .failure(FieldError(.missing, key)) }
        guard let int = value.intValue else {
            return .failure(
                FieldError(value.doubleValue.map(FieldError.isWhole) == true ? .outOfRange : .notWholeNumber, key))
        }
        return .success(int)
    }

    func flag(_ key: RequestField) -> Checked<Bool> {
        guard let value = request[key.name], !value.isNull else { return .success(false) }
        guard let bool = value.boolValue else { return .failure(FieldError(.notTrueOrFalse, key)) }
        return .success(bool)
    }

    func strings(_ key: RequestField) -> Checked<[String]?> {
        guard let value = request[key.name], !value.isNull else { return .success(nil) }
        guard let array = value.arrayValue, case let strings = array.compactMap(\.stringValue),
            strings.count == array.count
        else { return .failure(FieldError(.notStrings, key)) }
        return .success(strings)
    }

    /// Bytes given as `text` (UTF-8) or `base64`.
    func bytes() -> Checked<Data> {
        Checked { () throws(FieldError) -> Data in
            if let text = try optionalString(.text).get() { return Data(text.utf8) }
            if let encoded = try optionalString(.base64).get() {
                guard let data = Data(base64Encoded: encoded) else {
                    throw FieldError(.invalidBase64, .base64)
                }
                return data
            }
            throw FieldError(.noContents, .text)
        }
    }
}
