import Foundation

/// Reads a request line straight from its bytes into a ``ControlRequest``: one pass over
/// the line that checks it is JSON (RFC 8259, as ``JSONValue``'s parser reads it) and
/// decodes the fields the commands know as it meets them — strings into strings, the
/// `doc` and `id` left as slices of the line when they need no decoding — without a
/// value tree. A field whose value is JSON by nature (`json`, `patch`, `target`, an id
/// that is an array or object) is handed to the general parser as the slice it is.
///
/// A line that is not JSON gets the general parser's message (with line and column),
/// from the general parser: errors are rare, and the message is then the one it gives.
/// ``ControlRequest/reference(_:)-([UInt8])`` gives the meaning every line must have;
/// the decoder is tested against it.
public enum RequestDecoder {
    /// What `line` is. The request may hold slices of `line` (see ``LineBytes``): valid while `line` is.
    public static func decode(_ line: UnsafeRawBufferPointer) -> DecodedLine {
        switch scan(line) {
        case .decoded(let decoded): return decoded
        case .notJSON:
            // The general parser's message; should it read the line after all, its meaning.
            return ControlRequest.reference(Array(line))
        }
    }

    /// The decoder's own verdict, without asking the general parser about a line that is not JSON.
    public enum Scanned: Equatable, Sendable {
        case decoded(DecodedLine)
        case notJSON
    }

    public static func scan(_ line: UnsafeRawBufferPointer) -> Scanned {
        guard let base = line.baseAddress, !line.isEmpty else { return .notJSON }
        var scanner = Scanner(at: base, end: base + line.count)
        return scanner.line()
    }
}

/// The fields the commands read.
private enum Key: Int {
    case id, cmd, doc, text, json, base64, offset, length, patch, member, members, pointer, wait, durable, target
    case docs, events, to, type

    var name: String {
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

    /// The key whose name is `bytes` exactly.
    @inline(__always)
    static func named(_ name: UnsafeRawPointer, count: Int) -> Key? {
        @inline(__always) func at(_ offset: Int) -> UInt8 { name.load(fromByteOffset: offset, as: UInt8.self) }
        @inline(__always) func equals(_ text: StaticString) -> Bool {
            memcmp(name, text.utf8Start, count) == 0
        }
        switch count {
        case 2:
            if at(0) == UInt8(ascii: "i") && at(1) == UInt8(ascii: "d") { return .id }
            if at(0) == UInt8(ascii: "t") && at(1) == UInt8(ascii: "o") { return .to }
        case 3:
            if at(0) == UInt8(ascii: "c") && at(1) == UInt8(ascii: "m") && at(2) == UInt8(ascii: "d") { return .cmd }
            if at(0) == UInt8(ascii: "d") && at(1) == UInt8(ascii: "o") && at(2) == UInt8(ascii: "c") { return .doc }
        case 4:
            switch at(0) {
            case UInt8(ascii: "t"): return equals("text") ? .text : equals("type") ? .type : nil
            case UInt8(ascii: "j"): return equals("json") ? .json : nil
            case UInt8(ascii: "w"): return equals("wait") ? .wait : nil
            case UInt8(ascii: "d"): return equals("docs") ? .docs : nil
            default: return nil
            }
        case 5: return equals("patch") ? .patch : nil
        case 6:
            switch at(0) {
            case UInt8(ascii: "b"): return equals("base64") ? .base64 : nil
            case UInt8(ascii: "o"): return equals("offset") ? .offset : nil
            case UInt8(ascii: "l"): return equals("length") ? .length : nil
            case UInt8(ascii: "m"): return equals("member") ? .member : nil
            case UInt8(ascii: "t"): return equals("target") ? .target : nil
            case UInt8(ascii: "e"): return equals("events") ? .events : nil
            default: return nil
            }
        case 7:
            switch at(0) {
            case UInt8(ascii: "m"): return equals("members") ? .members : nil
            case UInt8(ascii: "p"): return equals("pointer") ? .pointer : nil
            case UInt8(ascii: "d"): return equals("durable") ? .durable : nil
            default: return nil
            }
        default: return nil
        }
        return nil
    }
}

/// A field's value as the scanner met it.
private enum Value {
    case absent
    case null
    case bool(Bool)
    /// A number's JSON text.
    case number(UnsafeRawBufferPointer)
    /// A string: its JSON text (quotes included), and its value when that is not the
    /// bytes between the quotes as they are (escapes), or was asked for.
    case string(token: UnsafeRawBufferPointer, decoded: String?, escaped: Bool)
    /// An array whose elements are all strings (kept for `docs` and `events`).
    case strings([String], UnsafeRawBufferPointer)
    /// An array or object's JSON text.
    case composite(UnsafeRawBufferPointer)

    var isAbsent: Bool {
        if case .absent = self { return true }
        return false
    }
}

/// The commands by name.
private enum CommandName {
    case status, list, open, create, get, set, append, replace, patch, putMember, removeMember, save, saveAll
    case revert, close, export, cancel, subscribe, sync, reload, metrics

    static func named(_ name: UnsafeRawBufferPointer) -> CommandName? {
        @inline(__always) func equals(_ text: StaticString) -> Bool {
            name.count == text.utf8CodeUnitCount && memcmp(name.baseAddress!, text.utf8Start, name.count) == 0
        }
        guard !name.isEmpty else { return nil }
        switch name[0] {
        case UInt8(ascii: "s"):
            if equals("set") { return .set }
            if equals("status") { return .status }
            if equals("save") { return .save }
            if equals("save-all") { return .saveAll }
            if equals("subscribe") { return .subscribe }
            if equals("sync") { return .sync }
        case UInt8(ascii: "a"): if equals("append") { return .append }
        case UInt8(ascii: "g"): if equals("get") { return .get }
        case UInt8(ascii: "l"): if equals("list") { return .list }
        case UInt8(ascii: "o"): if equals("open") { return .open }
        case UInt8(ascii: "c"):
            if equals("create") { return .create }
            if equals("close") { return .close }
            if equals("cancel") { return .cancel }
        case UInt8(ascii: "r"):
            if equals("replace") { return .replace }
            if equals("remove-member") { return .removeMember }
            if equals("revert") { return .revert }
            if equals("reload") { return .reload }
        case UInt8(ascii: "p"):
            if equals("patch") { return .patch }
            if equals("put-member") { return .putMember }
        case UInt8(ascii: "e"): if equals("export") { return .export }
        case UInt8(ascii: "m"): if equals("metrics") { return .metrics }
        default: break
        }
        return nil
    }
}

/// The fields of one request line, as met.
private struct Fields {
    var id = Value.absent
    var cmd = Value.absent
    var doc = Value.absent
    var text = Value.absent
    var json = Value.absent
    var base64 = Value.absent
    var offset = Value.absent
    var length = Value.absent
    var patch = Value.absent
    var member = Value.absent
    var members = Value.absent
    var pointer = Value.absent
    var wait = Value.absent
    var durable = Value.absent
    var target = Value.absent
    var docs = Value.absent
    var events = Value.absent
    var to = Value.absent
    var type = Value.absent

    subscript(key: Key) -> Value {
        get {
            switch key {
            case .id: id
            case .cmd: cmd
            case .doc: doc
            case .text: text
            case .json: json
            case .base64: base64
            case .offset: offset
            case .length: length
            case .patch: patch
            case .member: member
            case .members: members
            case .pointer: pointer
            case .wait: wait
            case .durable: durable
            case .target: target
            case .docs: docs
            case .events: events
            case .to: to
            case .type: type
            }
        }
        set {
            switch key {
            case .id: id = newValue
            case .cmd: cmd = newValue
            case .doc: doc = newValue
            case .text: text = newValue
            case .json: json = newValue
            case .base64: base64 = newValue
            case .offset: offset = newValue
            case .length: length = newValue
            case .patch: patch = newValue
            case .member: member = newValue
            case .members: members = newValue
            case .pointer: pointer = newValue
            case .wait: wait = newValue
            case .durable: durable = newValue
            case .target: target = newValue
            case .docs: docs = newValue
            case .events: events = newValue
            case .to: to = newValue
            case .type: type = newValue
            }
        }
    }

    // MARK: Reading fields as the commands read them (as ``ReferenceFields`` does)

    /// A string value's text.
    static func text(_ value: Value) -> String? {
        guard case .string(let token, let decoded, _) = value else { return nil }
        return decoded
            ?? String(decoding: UnsafeRawBufferPointer(rebasing: token.dropFirst().dropLast()), as: UTF8.self)
    }

    func string(_ key: Key) -> Checked<String> {
        let value = self[key]
        if value.isAbsent { return .failure(FieldError("missing field \"\(key.name)\"")) }
        guard let string = Self.text(value) else {
            return .failure(FieldError("field \"\(key.name)\" must be a string"))
        }
        return .success(string)
    }

    func document() -> Checked<DocumentName> {
        guard case .string(let token, let decoded, let escaped) = doc else {
            return string(.doc).map { _ in DocumentName("") }
        }
        let inside = LineBytes(borrowing: UnsafeRawBufferPointer(rebasing: token.dropFirst().dropLast()))
        return .success(DocumentName(raw: inside, decoded: escaped ? decoded : nil))
    }

    func optionalString(_ key: Key) -> Checked<String?> {
        switch self[key] {
        case .absent, .null: return .success(nil)
        case let value:
            guard let string = Self.text(value) else {
                return .failure(FieldError("field \"\(key.name)\" must be a string"))
            }
            return .success(string)
        }
    }

    func integer(_ key: Key) -> Checked<Int> {
        let value = self[key]
        if value.isAbsent { return .failure(FieldError("missing field \"\(key.name)\"")) }
        guard case .number(let token) = value, let int = Self.integer(token) else {
            return .failure(FieldError("field \"\(key.name)\" must be a whole number"))
        }
        return .success(int)
    }

    /// A number's value when it is whole (``JSONValue/intValue``'s rule).
    static func integer(_ token: UnsafeRawBufferPointer) -> Int? {
        let negative = token[0] == UInt8(ascii: "-")
        let digits = negative ? token.count - 1 : token.count
        if digits <= 18, !token.contains(where: { $0 == UInt8(ascii: ".") || $0 | 0x20 == UInt8(ascii: "e") }) {
            var value = 0
            for byte in token where byte != UInt8(ascii: "-") { value = value * 10 + Int(byte - UInt8(ascii: "0")) }
            return negative ? -value : value
        }
        let text = String(decoding: token, as: UTF8.self)
        return Int(text) ?? Double(text).flatMap { $0 == $0.rounded() ? Int(exactly: $0) : nil }
    }

    func flag(_ key: Key) -> Checked<Bool> {
        switch self[key] {
        case .absent, .null: return .success(false)
        case .bool(let value): return .success(value)
        default: return .failure(FieldError("field \"\(key.name)\" must be true or false"))
        }
    }

    func strings(_ key: Key) -> Checked<[String]?> {
        switch self[key] {
        case .absent, .null: return .success(nil)
        case .strings(let strings, _): return .success(strings)
        default: return .failure(FieldError("field \"\(key.name)\" must be an array of strings"))
        }
    }

    func bytes() -> Checked<Data> {
        Checked { () throws(FieldError) -> Data in
            if let text = try optionalString(.text).get() { return Data(text.utf8) }
            if let encoded = try optionalString(.base64).get() {
                guard let data = Data(base64Encoded: encoded) else {
                    throw FieldError("field \"base64\" is not valid base64")
                }
                return data
            }
            throw FieldError("give the contents as \"text\" or \"base64\"")
        }
    }

    /// The JSON text of any value.
    static func token(_ value: Value) -> UnsafeRawBufferPointer? {
        switch value {
        case .absent: nil
        case .null: UnsafeRawBufferPointer(start: nullText.utf8Start, count: 4)
        case .bool(let value):
            value
                ? UnsafeRawBufferPointer(start: trueText.utf8Start, count: 4)
                : UnsafeRawBufferPointer(start: falseText.utf8Start, count: 5)
        case .number(let token), .string(let token, _, _), .strings(_, let token), .composite(let token): token
        }
    }
    private static let nullText: StaticString = "null"
    private static let trueText: StaticString = "true"
    private static let falseText: StaticString = "false"

    /// A value as the general parser reads it.
    static func parsed(_ value: Value) -> JSONValue? {
        switch value {
        case .absent: return nil
        case .null: return .null
        case .bool(let value): return .bool(value)
        case .number(let token): return .number(String(decoding: token, as: UTF8.self))
        case .string: return .string(text(value)!)
        case .strings(_, let token), .composite(let token): return try? JSONValue(parsing: Array(token))
        }
    }

    /// A value's JSON text as ``JSONValue`` serialises it (compact): the bytes as sent for
    /// a scalar without escapes (the same bytes), else written again.
    static func canonical(_ value: Value) -> LineBytes? {
        switch value {
        case .absent: return nil
        case .null, .bool, .number, .string(_, _, false): return LineBytes(borrowing: token(value)!)
        case .string, .strings, .composite:
            guard let parsed = parsed(value) else { return nil }
            return LineBytes(parsed.serializedBytes())
        }
    }

    func request() -> DecodedLine {
        let id = Self.canonical(id)
        let name: CommandName?
        switch cmd {
        case .string(let token, let decoded, let escaped):
            if escaped, let decoded {
                var decoded = decoded
                name = decoded.withUTF8 { CommandName.named(UnsafeRawBufferPointer($0)) }
            } else {
                name = CommandName.named(UnsafeRawBufferPointer(rebasing: token.dropFirst().dropLast()))
            }
        default:
            return .refused(id: id, message: "the request has no \"cmd\" string")
        }
        let command: ControlRequest.Command
        switch name {
        case .set:
            let contents = Checked<ControlRequest.Contents> { () throws(FieldError) -> ControlRequest.Contents in
                if !json.isAbsent, let value = Self.parsed(json) { return .json(value) }
                if let text = try optionalString(.text).get() { return .text(text) }
                return .data(try bytes().get())
            }
            command = .set(document(), contents)
        case .append: command = .append(document(), string(.text))
        case .status: command = .status
        case .list: command = .list
        case .metrics: command = .metrics
        case .sync: command = .sync
        case .reload: command = .reload
        case .open: command = .open(string(.doc))
        case .create: command = .create(string(.doc))
        case .revert: command = .revert(string(.doc))
        case .close: command = .close(string(.doc))
        case .get:
            let query = Checked<ControlRequest.Query> { () throws(FieldError) -> ControlRequest.Query in
                if let pointer = try optionalString(.pointer).get() { return .pointer(pointer) }
                if let member = try optionalString(.member).get() { return .member(member) }
                if try flag(.members).get() { return .members }
                return .contents
            }
            command = .get(string(.doc), query)
        case .replace:
            command = .replace(
                string(.doc), offset: integer(.offset), length: integer(.length), text: string(.text))
        case .patch:
            let patchText = Checked<String> { () throws(FieldError) -> String in
                guard let value = Self.parsed(patch) else { throw FieldError("missing field \"patch\"") }
                return value.stringValue ?? value.serialized()
            }
            command = .patch(string(.doc), patchText)
        case .putMember: command = .putMember(string(.doc), member: string(.member), bytes())
        case .removeMember: command = .removeMember(string(.doc), member: string(.member))
        case .save: command = .save(string(.doc), wait: flag(.wait))
        case .saveAll: command = .saveAll(wait: flag(.wait))
        case .export:
            let docs = Checked<[String]> { () throws(FieldError) -> [String] in
                guard let paths = try strings(.docs).get(), !paths.isEmpty else {
                    throw FieldError("field \"docs\" must be a non-empty array of document paths")
                }
                return paths
            }
            command = .export(docs: docs, to: string(.to), type: optionalString(.type))
        case .cancel:
            let targetText = Checked<[UInt8]> { () throws(FieldError) -> [UInt8] in
                guard let text = Self.canonical(target) else {
                    throw FieldError("missing field \"target\" (the id of an export)")
                }
                return text.array
            }
            command = .cancel(target: targetText)
        case .subscribe: command = .subscribe(docs: strings(.docs), events: strings(.events))
        case nil: command = .unknown(Self.text(cmd)!)
        }
        return .request(ControlRequest(id: id, durable: flag(.durable), command: command))
    }
}

/// Reads through a raw pointer, one byte load at a time (no bounds checks beyond its own).
private struct Scanner {
    var position: UnsafeRawPointer
    let end: UnsafeRawPointer
    var fields = Fields()
    /// The fields met so far, by ``Key``.
    var seen: UInt32 = 0
    /// Names of other members, for a name given twice (compared as strings, as the general path compares them).
    var otherKeys: [String] = []
    /// The first member whose name was met before, and whether `id` was.
    var repeated: String?
    var idTwice = false

    init(at position: UnsafeRawPointer, end: UnsafeRawPointer) {
        self.position = position
        self.end = end
    }

    @inline(__always) func byte(_ at: UnsafeRawPointer) -> UInt8 { at.load(as: UInt8.self) }

    static let maximumDepth = 512

    mutating func line() -> RequestDecoder.Scanned {
        skipWhitespace()
        guard position < end else { return .notJSON }
        if byte(position) != UInt8(ascii: "{") {
            guard skipValue(depth: 0), atEnd() else { return .notJSON }
            return .decoded(.refused(id: nil, message: "a request must be a JSON object"))
        }
        guard object(), atEnd() else { return .notJSON }
        if let repeated {
            let id = idTwice ? nil : Fields.canonical(fields.id)
            return .decoded(.refused(id: id, message: "field \"\(repeated)\" is given more than once"))
        }
        return .decoded(fields.request())
    }

    mutating func atEnd() -> Bool {
        skipWhitespace()
        return position == end
    }

    /// The request's object, its members read into ``fields``.
    mutating func object() -> Bool {
        position += 1
        skipWhitespace()
        guard position < end else { return false }
        if byte(position) == UInt8(ascii: "}") {
            position += 1
            return true
        }
        while true {
            skipWhitespace()
            guard position < end, byte(position) == UInt8(ascii: "\"") else { return false }
            let key: Key?
            let nameStart = position + 1
            if let plainEnd = plainKeyEnd() {
                key = Key.named(nameStart, count: plainEnd - nameStart)
                if key == nil {
                    noteOther(
                        String(
                            decoding: UnsafeRawBufferPointer(start: nameStart, count: plainEnd - nameStart),
                            as: UTF8.self))
                }
            } else {
                guard case .string(_, let decoded?, _)? = string(decode: true) else { return false }
                var name = decoded
                key = name.withUTF8 { bytes -> Key? in
                    guard let base = bytes.baseAddress else { return nil }
                    return Key.named(UnsafeRawPointer(base), count: bytes.count)
                }
                if key == nil { noteOther(decoded) }
            }
            skipWhitespace()
            guard position < end, byte(position) == UInt8(ascii: ":") else { return false }
            position += 1
            skipWhitespace()
            guard let value = value(for: key) else { return false }
            if let key {
                let bit = UInt32(1) << key.rawValue
                if seen & bit != 0 {
                    if repeated == nil { repeated = key.name }
                    if key == .id { idTwice = true }
                } else {
                    seen |= bit
                }
                fields[key] = value
            }
            skipWhitespace()
            guard position < end else { return false }
            let next = byte(position)
            position += 1
            if next == UInt8(ascii: ",") { continue }
            return next == UInt8(ascii: "}")
        }
    }

    mutating func noteOther(_ name: String) {
        if otherKeys.contains(name) {
            if repeated == nil { repeated = name }
        } else {
            otherKeys.append(name)
        }
    }

    /// A member name of printable ASCII without escapes: moves past its closing quote and
    /// returns where that is; `nil` (not moved) for any other name.
    mutating func plainKeyEnd() -> UnsafeRawPointer? {
        var at = position + 1
        while at < end {
            let byte = byte(at)
            if byte == UInt8(ascii: "\"") {
                position = at + 1
                return at
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 || byte >= 0x80 { return nil }
            at += 1
        }
        return nil
    }

    /// A member's value, decoded as far as the field `key` needs it.
    mutating func value(for key: Key?) -> Value? {
        guard position < end else { return nil }
        let first = byte(position)
        switch first {
        case UInt8(ascii: "\""):
            // The id, the command and the path need no string when they are plain; the others do.
            let decode: Bool
            switch key {
            case .id?, .cmd?, .doc?, .json?, .target?, nil: decode = false
            default: decode = true
            }
            return string(decode: decode)
        case UInt8(ascii: "["):
            if key == .docs || key == .events { return stringArray() }
            let start = position
            guard skipValue(depth: 1) else { return nil }
            return .composite(UnsafeRawBufferPointer(start: start, count: position - start))
        case UInt8(ascii: "{"):
            let start = position
            guard skipValue(depth: 1) else { return nil }
            return .composite(UnsafeRawBufferPointer(start: start, count: position - start))
        case UInt8(ascii: "t"):
            guard word("true") else { return nil }
            return .bool(true)
        case UInt8(ascii: "f"):
            guard word("false") else { return nil }
            return .bool(false)
        case UInt8(ascii: "n"):
            guard word("null") else { return nil }
            return .null
        default:
            let start = position
            guard number() else { return nil }
            return .number(UnsafeRawBufferPointer(start: start, count: position - start))
        }
    }

    /// An array of strings, or (with any other element) the array's text.
    mutating func stringArray() -> Value? {
        let start = position
        position += 1
        var strings: [String]? = []
        skipWhitespace()
        if position < end, byte(position) == UInt8(ascii: "]") {
            position += 1
            return .strings([], UnsafeRawBufferPointer(start: start, count: position - start))
        }
        while true {
            skipWhitespace()
            guard position < end else { return nil }
            if byte(position) == UInt8(ascii: "\"") {
                guard let element = string(decode: true) else { return nil }
                strings?.append(Fields.text(element)!)
            } else {
                guard skipValue(depth: 2) else { return nil }
                strings = nil
            }
            skipWhitespace()
            guard position < end else { return nil }
            let next = byte(position)
            position += 1
            if next == UInt8(ascii: ",") { continue }
            guard next == UInt8(ascii: "]") else { return nil }
            let token = UnsafeRawBufferPointer(start: start, count: position - start)
            return strings.map { .strings($0, token) } ?? .composite(token)
        }
    }

    /// Checks any value, nested `depth` levels deep in the line's value, and moves past it.
    mutating func skipValue(depth: Int) -> Bool {
        guard position < end else { return false }
        switch byte(position) {
        case UInt8(ascii: "\""): return string(decode: false) != nil
        case UInt8(ascii: "t"): return word("true")
        case UInt8(ascii: "f"): return word("false")
        case UInt8(ascii: "n"): return word("null")
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            let isObject = byte(position) == UInt8(ascii: "{")
            let close = isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")
            guard depth + 1 <= Self.maximumDepth else { return false }
            position += 1
            skipWhitespace()
            guard position < end else { return false }
            if byte(position) == close {
                position += 1
                return true
            }
            while true {
                skipWhitespace()
                if isObject {
                    guard position < end, byte(position) == UInt8(ascii: "\""), string(decode: false) != nil else {
                        return false
                    }
                    skipWhitespace()
                    guard position < end, byte(position) == UInt8(ascii: ":") else { return false }
                    position += 1
                    skipWhitespace()
                }
                guard skipValue(depth: depth + 1) else { return false }
                skipWhitespace()
                guard position < end else { return false }
                let next = byte(position)
                position += 1
                if next == UInt8(ascii: ",") { continue }
                return next == close
            }
        default: return number()
        }
    }

    mutating func word(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard end - position >= count, memcmp(position, text.utf8Start, count) == 0 else { return false }
        position += count
        return true
    }

    /// A number in RFC 8259's form.
    mutating func number() -> Bool {
        @inline(__always) func digits() -> Int {
            let start = position
            while position < end, byte(position) &- UInt8(ascii: "0") < 10 { position += 1 }
            return position - start
        }
        if position < end, byte(position) == UInt8(ascii: "-") { position += 1 }
        guard position < end else { return false }
        if byte(position) == UInt8(ascii: "0") {
            position += 1
        } else if digits() == 0 {
            return false
        }
        if position < end, byte(position) == UInt8(ascii: ".") {
            position += 1
            if digits() == 0 { return false }
        }
        if position < end, byte(position) | 0x20 == UInt8(ascii: "e") {
            position += 1
            if position < end, byte(position) == UInt8(ascii: "+") || byte(position) == UInt8(ascii: "-") {
                position += 1
            }
            if digits() == 0 { return false }
        }
        return true
    }

    /// A string at `position`: checked (no raw control characters, known escapes,
    /// surrogates in pairs, UTF-8), with its value made when it has escapes, is not
    /// ASCII, or `decode` asks for it.
    mutating func string(decode: Bool) -> Value? {
        let open = position
        position += 1
        let start = position
        var ascii = true
        while position < end {
            // Eight bytes at a time while none of them ends the plain run: no quote, no
            // backslash, no control character, nothing outside ASCII (those are looked
            // at one by one below). Large values are mostly such runs.
            while end - position >= 8 {
                let word = position.loadUnaligned(as: UInt64.self)
                let ones: UInt64 = 0x0101_0101_0101_0101
                let quote = word ^ (ones &* 0x22)
                let backslash = word ^ (ones &* 0x5C)
                let stops =
                    ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | (word &- ones &* 0x20) | word
                if stops & (ones &* 0x80) != 0 { break }
                position += 8
            }
            guard position < end else { break }
            let byte = byte(position)
            if byte == UInt8(ascii: "\"") {
                let run = UnsafeRawBufferPointer(start: start, count: position - start)
                position += 1
                let token = UnsafeRawBufferPointer(start: open, count: position - open)
                if ascii {
                    return .string(
                        token: token, decoded: decode ? String(decoding: run, as: UTF8.self) : nil, escaped: false)
                }
                guard let text = String(validating: run, as: UTF8.self) else { return nil }
                return .string(token: token, decoded: text, escaped: false)
            }
            if byte == UInt8(ascii: "\\") { return escapedString(open: open, from: start) }
            if byte < 0x20 { return nil }
            if byte >= 0x80 { ascii = false }
            position += 1
        }
        return nil
    }

    /// The rest of a string that has escapes, from its first byte at `start`.
    mutating func escapedString(open: UnsafeRawPointer, from start: UnsafeRawPointer) -> Value? {
        var decoded: [UInt8] = []
        decoded.reserveCapacity(position - start + 64)
        decoded.append(contentsOf: UnsafeRawBufferPointer(start: start, count: position - start))
        while position < end {
            let byte = byte(position)
            position += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: decoded, as: UTF8.self) else { return nil }
                return .string(
                    token: UnsafeRawBufferPointer(start: open, count: position - open), decoded: text, escaped: true)
            case UInt8(ascii: "\\"):
                guard position < end else { return nil }
                let escape = self.byte(position)
                position += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                case UInt8(ascii: "n"): decoded.append(10)
                case UInt8(ascii: "r"): decoded.append(13)
                case UInt8(ascii: "t"): decoded.append(9)
                case UInt8(ascii: "b"): decoded.append(8)
                case UInt8(ascii: "f"): decoded.append(12)
                case UInt8(ascii: "u"):
                    guard var code = hex4() else { return nil }
                    if (0xD800...0xDBFF).contains(code) {
                        guard end - position >= 2, self.byte(position) == UInt8(ascii: "\\"),
                            self.byte(position + 1) == UInt8(ascii: "u")
                        else { return nil }
                        position += 2
                        guard let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(code) {
                        return nil
                    }
                    guard let scalar = Unicode.Scalar(code) else { return nil }
                    decoded.append(contentsOf: UTF8.encode(scalar)!)
                default: return nil
                }
            case 0..<0x20:
                return nil
            default:
                decoded.append(byte)
            }
        }
        return nil
    }

    /// Four hex digits.
    mutating func hex4() -> UInt32? {
        guard end - position >= 4 else { return nil }
        var value: UInt32 = 0
        for offset in 0..<4 {
            let byte = position.load(fromByteOffset: offset, as: UInt8.self)
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        position += 4
        return value
    }

    mutating func skipWhitespace() {
        while position < end {
            switch byte(position) {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }
}
