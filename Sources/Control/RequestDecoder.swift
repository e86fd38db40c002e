import CLinux
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
        if let decoded = decoded(line) { return decoded }
        // Not JSON: the general parser's message (should it read the line after all, its meaning).
        return ControlRequest.reference(Array(line))
    }

    /// The decoder's own verdict, without asking the general parser about a line that is not JSON.
    public enum Scanned: Equatable, Sendable {
        case decoded(DecodedLine)
        case notJSON
    }

    public static func scan(_ line: UnsafeRawBufferPointer) -> Scanned {
        decoded(line).map(Scanned.decoded) ?? .notJSON
    }

    /// What `line` is, or `nil` when it is not JSON.
    static func decoded(_ line: UnsafeRawBufferPointer) -> DecodedLine? {
        guard let base = line.baseAddress, !line.isEmpty else { return nil }
        // The result is stored, not returned through the allocation's generic result.
        var decoded: DecodedLine?
        withUnsafeTemporaryAllocation(of: Slot.self, capacity: Key.count) { slots in
            UnsafeMutableRawPointer(slots.baseAddress!).initializeMemory(
                as: UInt8.self, repeating: 0, count: Key.count * MemoryLayout<Slot>.stride)
            var scanner = Scanner(at: base, end: base + line.count, slots: slots.baseAddress!)
            decoded = scanner.line()
        }
        return decoded
    }
}

private typealias Key = RequestField

extension RequestField {
    /// The key whose name is `bytes` exactly.
    @inline(__always)
    fileprivate static func named(_ name: UnsafeRawPointer, count: Int) -> RequestField? {
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

/// A field's value as the scanner met it: its JSON text, its kind, and for a string
/// that is not its bytes as they are (escapes, or not ASCII) where its value is kept.
/// Plain data, so that a line's fields cost no reference counting until a command's
/// fields are made from them.
private struct Slot {
    enum Kind: UInt8 {
        case absent, null, `true`, `false`, number, string, strings, composite
    }
    // All zeros is an absent field: the slots are cleared with one `memset`.
    var start: UnsafeRawPointer? = nil
    var length: UInt32 = 0
    var kind = Kind.absent
    /// A string with escapes.
    var escaped = false
    /// One more than the index of a string's value in ``Scanner/decoded`` (of an array of
    /// strings', in ``Scanner/arrays``); `0` when the bytes between the quotes are the value.
    var kept: UInt16 = 0

    init() {}

    init(start: UnsafeRawPointer, count: Int, kind: Kind, escaped: Bool = false, kept: Int = 0) {
        self.start = start
        self.length = UInt32(truncatingIfNeeded: count)
        self.kind = kind
        self.escaped = escaped
        self.kept = UInt16(truncatingIfNeeded: kept)
    }

    var count: Int { Int(length) }
    var decoded: Int { Int(kept) - 1 }
    var token: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: start, count: count) }
    /// A string's bytes between its quotes.
    var inside: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: start.map { $0 + 1 }, count: count - 2) }
}

/// Reads through a raw pointer, one byte load at a time (no bounds checks beyond its own).
private struct Scanner {
    var position: UnsafeRawPointer
    let end: UnsafeRawPointer
    /// The fields met, by ``Key``.
    let slots: UnsafeMutablePointer<Slot>
    /// The fields met so far, by ``Key``.
    var seen: UInt32 = 0
    /// Whether `id` was given more than once.
    var idTwice = false
    /// The command, when `cmd` was read as one of the plain edits' names.
    var plainCommand: CommandName?
    /// What plain requests do not need, made when a line needs it: a plain request's
    /// scanner holds nothing to release.
    var rare: Rare?

    final class Rare {
        /// The values of strings that are not their bytes as they are.
        var decoded: [String] = []
        /// The values of arrays of strings (`docs`, `events`).
        var arrays: [[String]] = []
        /// The names of fields the decoder does not know, by their bytes: hashed, so that a
        /// request of many such names is not compared name by name (quadratic, on the loop),
        /// and compared as JSON compares names (and as the general path,
        /// ``ControlRequest/reference(_:)``, does), not by canonical equivalence.
        var otherKeys: Set<[UInt8]> = []
        /// The first member whose name was met before.
        var repeated: String?
    }

    var more: Rare {
        mutating get {
            if let rare { return rare }
            let made = Rare()
            rare = made
            return made
        }
    }

    var repeated: String? { rare?.repeated }

    mutating func noteRepeated(_ name: String) {
        if more.repeated == nil { more.repeated = name }
    }

    /// Keeps a string's value; returns its ``Slot/kept``.
    mutating func keepValue(_ text: String) -> UInt16 {
        let rare = more
        rare.decoded.append(text)
        return UInt16(truncatingIfNeeded: rare.decoded.count)
    }

    /// Drops the value kept last.
    func dropKept() { rare?.decoded.removeLast() }

    init(at position: UnsafeRawPointer, end: UnsafeRawPointer, slots: UnsafeMutablePointer<Slot>) {
        self.position = position
        self.end = end
        self.slots = slots
    }

    @inline(__always) func byte(_ at: UnsafeRawPointer) -> UInt8 { at.load(as: UInt8.self) }

    static let maximumDepth = 512
    private static let setName: StaticString = "\"set\""
    private static let appendName: StaticString = "\"append\""

    @inline(__always)
    mutating func line() -> DecodedLine? {
        skipWhitespace()
        guard position < end else { return nil }
        if byte(position) != UInt8(ascii: "{") {
            guard skipValue(depth: 0), atEnd() else { return nil }
            return .refused(id: nil, message: "a request must be a JSON object")
        }
        guard object(), atEnd() else { return nil }
        if let repeated {
            let id = idTwice ? nil : canonical(.id)
            return .refused(id: id, message: "field \"\(repeated)\" is given more than once")
        }
        return request()
    }

    mutating func atEnd() -> Bool {
        skipWhitespace()
        return position == end
    }

    // MARK: Scanning

    /// The request's object, its members read into ``slots``.
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
                guard let slot = string(keep: true) else { return false }
                var name = text(slot)
                if slot.decoded >= 0 { dropKept() }
                key = name.withUTF8 { bytes -> Key? in
                    guard let base = bytes.baseAddress else { return nil }
                    return Key.named(UnsafeRawPointer(base), count: bytes.count)
                }
                if key == nil { noteOther(name) }
            }
            skipWhitespace()
            guard position < end, byte(position) == UInt8(ascii: ":") else { return false }
            position += 1
            skipWhitespace()
            if let key {
                // A field given twice refuses the request: its second value is only checked.
                let bit = UInt32(1) << key.rawValue
                if seen & bit != 0 {
                    noteRepeated(key.name)
                    if key == .id { idTwice = true }
                    guard skipValue(depth: 1) else { return false }
                } else {
                    seen |= bit
                    guard let value = value(for: key) else { return false }
                    slots[key.rawValue] = value
                }
            } else {
                guard skipValue(depth: 1) else { return false }
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
        let rare = more
        if !rare.otherKeys.insert(Array(name.utf8)).inserted { noteRepeated(name) }
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

    /// The value of a field the commands read, with what they need of it kept.
    mutating func value(for key: Key) -> Slot? {
        guard position < end else { return nil }
        let start = position
        let kind: Slot.Kind
        switch byte(position) {
        case UInt8(ascii: "\"") where key == .cmd:
            // The plain edits' names, compared as they are.
            if end - position >= 5, memcmp(position, Self.setName.utf8Start, 5) == 0 {
                plainCommand = .set
            } else if end - position >= 8, memcmp(position, Self.appendName.utf8Start, 8) == 0 {
                plainCommand = .append
            } else {
                return string(keep: true)
            }
            position = start + (plainCommand == .set ? 5 : 8)
            return Slot(start: start, count: position - start, kind: .string)
        case UInt8(ascii: "\""): return string(keep: true)
        case UInt8(ascii: "["):
            if key == .docs || key == .events { return stringArray() }
            guard skipValue(depth: 1) else { return nil }
            kind = .composite
        case UInt8(ascii: "{"):
            guard skipValue(depth: 1) else { return nil }
            kind = .composite
        case UInt8(ascii: "t"):
            guard word("true") else { return nil }
            kind = .true
        case UInt8(ascii: "f"):
            guard word("false") else { return nil }
            kind = .false
        case UInt8(ascii: "n"):
            guard word("null") else { return nil }
            kind = .null
        default:
            guard number() else { return nil }
            kind = .number
        }
        return Slot(start: start, count: position - start, kind: kind)
    }

    /// An array of strings, or (with any other element) an array.
    mutating func stringArray() -> Slot? {
        let start = position
        position += 1
        var strings: [String]? = []
        skipWhitespace()
        if position < end, byte(position) == UInt8(ascii: "]") {
            position += 1
        } else {
            while true {
                skipWhitespace()
                guard position < end else { return nil }
                if byte(position) == UInt8(ascii: "\"") {
                    guard let element = string(keep: true) else { return nil }
                    let value = text(element)
                    if element.decoded >= 0 { dropKept() }
                    strings?.append(value)
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
                break
            }
        }
        guard let strings else { return Slot(start: start, count: position - start, kind: .composite) }
        let rare = more
        rare.arrays.append(strings)
        return Slot(start: start, count: position - start, kind: .strings, kept: rare.arrays.count)
    }

    /// Checks any value, nested `depth` levels deep in the line's value, and moves past it.
    mutating func skipValue(depth: Int) -> Bool {
        guard position < end else { return false }
        switch byte(position) {
        case UInt8(ascii: "\""): return string(keep: false) != nil
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
                    guard position < end, byte(position) == UInt8(ascii: "\""), string(keep: false) != nil else {
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

    /// A string at `position`, checked: no raw control characters, known escapes,
    /// surrogates in pairs, UTF-8. With `keep`, the value of one that is not its bytes as
    /// they are (escapes, or not ASCII) is kept in ``decoded``.
    mutating func string(keep: Bool) -> Slot? {
        let open = position
        position += 1
        var ascii = true
        while position < end {
            // Sixteen bytes at a time (SSE2, ``clinux_json_plain_prefix``), then eight, while
            // none of them ends the plain run: no quote, no backslash, no control character,
            // nothing outside ASCII (those are looked at one by one below). Large values are
            // mostly such runs.
            position += clinux_json_plain_prefix(position, end - position)
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
                position += 1
                var slot = Slot(start: open, count: position - open, kind: .string)
                if !ascii {
                    guard let text = String(validating: slot.inside, as: UTF8.self) else { return nil }
                    if keep {
                        slot.kept = keepValue(text)
                    }
                }
                return slot
            }
            if byte == UInt8(ascii: "\\") { return escapedString(open: open, keep: keep) }
            if byte < 0x20 { return nil }
            if byte >= 0x80 { ascii = false }
            position += 1
        }
        return nil
    }

    /// The rest of a string that has escapes, from the backslash at `position`.
    mutating func escapedString(open: UnsafeRawPointer, keep: Bool) -> Slot? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(position - open + 64)
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: open + 1, count: position - open - 1))
        while position < end {
            let byte = byte(position)
            position += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
                var slot = Slot(start: open, count: position - open, kind: .string, escaped: true)
                if keep {
                    slot.kept = keepValue(text)
                }
                return slot
            case UInt8(ascii: "\\"):
                guard position < end else { return nil }
                let escape = self.byte(position)
                position += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): bytes.append(escape)
                case UInt8(ascii: "n"): bytes.append(10)
                case UInt8(ascii: "r"): bytes.append(13)
                case UInt8(ascii: "t"): bytes.append(9)
                case UInt8(ascii: "b"): bytes.append(8)
                case UInt8(ascii: "f"): bytes.append(12)
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
                    bytes.append(contentsOf: UTF8.encode(scalar)!)
                default: return nil
                }
            case 0..<0x20:
                return nil
            default:
                bytes.append(byte)
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

    // MARK: Reading fields as the commands read them (as the reference does)

    /// A string's value (kept, or its bytes as they are).
    @inline(__always)
    func text(_ slot: Slot) -> String {
        slot.decoded >= 0 ? rare!.decoded[slot.decoded] : String(decoding: slot.inside, as: UTF8.self)
    }

    @inline(__always)
    func string(_ key: Key) -> Checked<String> {
        let slot = slots[key.rawValue]
        switch slot.kind {
        case .string: return .success(text(slot))
        case .absent: return .failure(FieldError(.missing, key))
        default: return .failure(FieldError(.notString, key))
        }
    }

    @inline(__always)
    func optionalString(_ key: Key) -> Checked<String?> {
        let slot = slots[key.rawValue]
        switch slot.kind {
        case .string: return .success(text(slot))
        case .absent, .null: return .success(nil)
        default: return .failure(FieldError(.notString, key))
        }
    }

    /// `doc` as sent, for `set` and `append`: the line's bytes, and the path when they are not it.
    @inline(__always)
    func document() -> Checked<DocumentName> {
        let slot = slots[Key.doc.rawValue]
        guard slot.kind == .string else { return string(.doc).map { _ in DocumentName("") } }
        if slot.escaped { return .success(DocumentName(rare!.decoded[slot.decoded])) }
        return .success(DocumentName(LineBytes(borrowing: slot.inside)))
    }

    func integer(_ key: Key) -> Checked<Int> {
        let slot = slots[key.rawValue]
        if slot.kind == .absent { return .failure(FieldError(.missing, key)) }
        guard slot.kind == .number else { return .failure(FieldError(.notWholeNumber, key)) }
        guard let int = Self.integer(slot.token) else {
            let value = Double(String(decoding: slot.token, as: UTF8.self))
            return .failure(FieldError(value.map(FieldError.isWhole) == true ? .outOfRange : .notWholeNumber, key))
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
        return JSONValue.wholeNumber(text)
    }

    @inline(__always)
    func flag(_ key: Key) -> Checked<Bool> {
        switch slots[key.rawValue].kind {
        case .absent, .null, .false: .success(false)
        case .true: .success(true)
        default: .failure(FieldError(.notTrueOrFalse, key))
        }
    }

    func strings(_ key: Key) -> Checked<[String]?> {
        let slot = slots[key.rawValue]
        switch slot.kind {
        case .absent, .null: return .success(nil)
        case .strings: return .success(rare!.arrays[slot.decoded])
        default: return .failure(FieldError(.notStrings, key))
        }
    }

    /// Bytes given as `text` (UTF-8) or `base64`.
    func bytes() -> Checked<Data> {
        switch optionalString(.text) {
        case .failure(let error): return .failure(error)
        case .success(let text?): return .success(Data(text.utf8))
        case .success(nil): break
        }
        switch optionalString(.base64) {
        case .failure(let error): return .failure(error)
        case .success(let encoded?):
            guard let data = Data(base64Encoded: encoded) else {
                return .failure(FieldError(.invalidBase64, .base64))
            }
            return .success(data)
        case .success(nil): return .failure(FieldError(.noContents, .text))
        }
    }

    /// What `set` puts in the document: `json`, else `text`, else the bytes.
    @inline(__always)
    func contents() -> Checked<ControlRequest.Contents> {
        if slots[Key.json.rawValue].kind != .absent, let value = parsed(.json) { return .success(.json(value)) }
        switch optionalString(.text) {
        case .failure(let error): return .failure(error)
        case .success(let text?): return .success(.text(text))
        case .success(nil): return bytes().map(ControlRequest.Contents.data)
        }
    }

    /// A field's value as the general parser reads it.
    func parsed(_ key: Key) -> JSONValue? {
        let slot = slots[key.rawValue]
        switch slot.kind {
        case .absent: return nil
        case .null: return .null
        case .true: return .bool(true)
        case .false: return .bool(false)
        case .number: return .number(String(decoding: slot.token, as: UTF8.self))
        case .string: return .string(text(slot))
        case .strings, .composite: return try? JSONValue(parsing: Array(slot.token))
        }
    }

    /// A field's JSON text as ``JSONValue`` serialises it (compact): the bytes as sent for
    /// a scalar without escapes (they are the same), else written again.
    @inline(__always)
    func canonical(_ key: Key) -> LineBytes? {
        let slot = slots[key.rawValue]
        switch slot.kind {
        case .absent: return nil
        case .null, .true, .false, .number: return LineBytes(borrowing: slot.token)
        case .string where !slot.escaped: return LineBytes(borrowing: slot.token)
        case .string, .strings, .composite: return parsed(key).map { LineBytes($0.serializedBytes()) }
        }
    }

    @inline(__always)
    func request() -> DecodedLine {
        let id = canonical(.id)
        let cmd = slots[Key.cmd.rawValue]
        guard cmd.kind == .string else { return .refused(id: id, message: "the request has no \"cmd\" string") }
        let name: CommandName?
        if let plainCommand {
            name = plainCommand
        } else if cmd.escaped {
            var text = text(cmd)
            name = text.withUTF8 { CommandName.named(UnsafeRawBufferPointer($0)) }
        } else {
            name = CommandName.named(cmd.inside)
        }
        // Each command's request made where its fields are read, its parts moved in.
        let durable = flag(.durable)
        @inline(__always) func made(_ command: consuming ControlRequest.Command) -> DecodedLine {
            .request(ControlRequest(id: id, durable: durable, command: command))
        }
        switch name {
        case .set: return made(.set(document(), contents()))
        case .append: return made(.append(document(), string(.text)))
        case .status: return made(.status)
        case .list: return made(.list)
        case .metrics: return made(.metrics)
        case .sync: return made(.sync)
        case .reload: return made(.reload)
        case .open: return made(.open(string(.doc)))
        case .create: return made(.create(string(.doc)))
        case .revert: return made(.revert(string(.doc)))
        case .close: return made(.close(string(.doc)))
        case .get:
            let query: Checked<ControlRequest.Query>
            switch (optionalString(.pointer), optionalString(.member), flag(.members)) {
            case (.failure(let error), _, _): query = .failure(error)
            case (.success(let pointer?), _, _): query = .success(.pointer(pointer))
            case (_, .failure(let error), _): query = .failure(error)
            case (_, .success(let member?), _): query = .success(.member(member))
            case (_, _, .failure(let error)): query = .failure(error)
            case (_, _, .success(let members)): query = .success(members ? .members : .contents)
            }
            return made(.get(string(.doc), query))
        case .replace:
            return made(.replace(string(.doc), offset: integer(.offset), length: integer(.length), text: string(.text)))
        case .patch:
            let patch: Checked<String> =
                parsed(.patch).map { .success($0.stringValue ?? $0.serialized()) }
                ?? .failure(FieldError(.missing, .patch))
            return made(.patch(string(.doc), patch))
        case .putMember: return made(.putMember(string(.doc), member: string(.member), bytes()))
        case .removeMember: return made(.removeMember(string(.doc), member: string(.member)))
        case .save: return made(.save(string(.doc), wait: flag(.wait)))
        case .saveAll: return made(.saveAll(wait: flag(.wait)))
        case .export:
            let docs: Checked<[String]>
            switch strings(.docs) {
            case .failure(let error): docs = .failure(error)
            case .success(let paths?) where !paths.isEmpty: docs = .success(paths)
            case .success: docs = .failure(FieldError(.noDocuments, .docs))
            }
            return made(.export(docs: docs, to: string(.to), type: optionalString(.type)))
        case .cancel:
            let target: Checked<[UInt8]> =
                canonical(.target).map { .success($0.array) }
                ?? .failure(FieldError(.missingTarget, .target))
            return made(.cancel(target: target))
        case .subscribe: return made(.subscribe(docs: strings(.docs), events: strings(.events)))
        case nil: return made(.unknown(text(cmd)))
        }
    }
}
