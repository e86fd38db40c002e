import Foundation

/// A JSON value that keeps the order of object members, so that a document patched
/// and saved again reads the way it was written.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.number(let x), .number(let y)): x == y || Double(x) == Double(y)
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)):
            x.count == y.count
                && x.allSatisfy { member in y.contains { $0.key == member.key && $0.value == member.value } }
        default: false
        }
    }
}

/// A JSON text that is not valid, with where the parser stopped.
public struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset from the start (0-based).
    public var offset: Int
    public var line: Int
    public var column: Int
    public var message: String

    public var description: String { "invalid JSON at line \(line), column \(column) (byte \(offset)): \(message)" }
}

// MARK: Parsing (RFC 8259)

extension JSONValue {
    public init(parsing text: String) throws(JSONSyntaxError) {
        var parser = JSONParser(bytes: Array(text.utf8))
        self = try parser.parseDocument()
    }

    public init(parsing bytes: [UInt8]) throws(JSONSyntaxError) {
        var parser = JSONParser(bytes: bytes)
        self = try parser.parseDocument()
    }
}

struct JSONParser {
    let bytes: [UInt8]
    var index = 0
    var depth = 0
    static let maximumDepth = 512

    init(bytes: [UInt8]) { self.bytes = bytes }

    func error(_ message: String, at offset: Int? = nil) -> JSONSyntaxError {
        let offset = offset ?? index
        var line = 1
        var column = 1
        for byte in bytes[..<min(offset, bytes.count)] {
            if byte == UInt8(ascii: "\n") {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
        }
        return JSONSyntaxError(offset: offset, line: line, column: column, message: message)
    }

    mutating func parseDocument() throws(JSONSyntaxError) -> JSONValue {
        skipWhitespace()
        if index == bytes.count { throw error("the text is empty; expected a JSON value") }
        let value = try parseValue()
        skipWhitespace()
        if index != bytes.count { throw error("unexpected \(describe(bytes[index])) after the JSON value") }
        return value
    }

    mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[index]) { index += 1 }
    }

    func describe(_ byte: UInt8) -> String {
        byte >= 0x20 && byte < 0x7F ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
    }

    mutating func parseValue() throws(JSONSyntaxError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of text; expected a value") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectWord("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectWord("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectWord("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected \(describe(bytes[index])); expected a value")
        }
    }

    mutating func expectWord(_ word: String) throws(JSONSyntaxError) {
        let w = Array(word.utf8)
        guard index + w.count <= bytes.count, Array(bytes[index..<index + w.count]) == w else {
            throw error("unexpected \(describe(bytes[index])); expected a value")
        }
        index += w.count
    }

    mutating func enter() throws(JSONSyntaxError) {
        depth += 1
        if depth > Self.maximumDepth { throw error("nested more than \(Self.maximumDepth) levels deep") }
    }

    mutating func parseObject() throws(JSONSyntaxError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error(
                    index < bytes.count
                        ? "expected a member name in double quotes" : "unexpected end of text in an object")
            }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw error("expected ':' after a member name")
            }
            index += 1
            skipWhitespace()
            members.append((key, try parseValue()))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of text; expected ',' or '}'") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            throw error("unexpected \(describe(bytes[index])); expected ',' or '}'")
        }
    }

    mutating func parseArray() throws(JSONSyntaxError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of text; expected ',' or ']'") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            throw error("unexpected \(describe(bytes[index])); expected ',' or ']'")
        }
    }

    mutating func parseNumber() throws(JSONSyntaxError) -> String {
        let start = index
        func digits() -> Int {
            let s = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            return index - s
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error("a number needs digits") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits() == 0 {
            throw error("a number needs digits")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            if digits() == 0 { throw error("expected digits after the decimal point") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            if digits() == 0 { throw error("expected digits in the exponent") }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    mutating func parseString() throws(JSONSyntaxError) -> String {
        let open = index
        index += 1
        var runStart = index
        var result = ""
        while true {
            guard index < bytes.count else { throw error("unterminated string", at: open) }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let run = try text(runStart..<index)
                if result.isEmpty {
                    index += 1
                    return run
                }
                result += run
                index += 1
                return result
            }
            if byte < 0x20 { throw error("control character \(describe(byte)) in a string must be escaped") }
            if byte == UInt8(ascii: "\\") {
                result += try text(runStart..<index)
                index += 1
                guard index < bytes.count else { throw error("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): result += "\""
                case UInt8(ascii: "\\"): result += "\\"
                case UInt8(ascii: "/"): result += "/"
                case UInt8(ascii: "b"): result += "\u{08}"
                case UInt8(ascii: "f"): result += "\u{0C}"
                case UInt8(ascii: "n"): result += "\n"
                case UInt8(ascii: "r"): result += "\r"
                case UInt8(ascii: "t"): result += "\t"
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800...0xDBFF).contains(code) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw error("a high surrogate must be followed by a low one") }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid low surrogate") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(code) {
                        throw error("a low surrogate without a high one")
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw error("invalid \\u escape") }
                    result.unicodeScalars.append(scalar)
                default:
                    throw error("unknown escape \\\(Character(Unicode.Scalar(escape)))", at: index - 2)
                }
                runStart = index
                continue
            }
            index += 1
        }
    }

    /// The bytes in `range` as a string: ASCII is taken as it is, anything else must be valid UTF-8.
    func text(_ range: Range<Int>) throws(JSONSyntaxError) -> String {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONSyntaxError) -> String in
            let run = UnsafeBufferPointer(rebasing: buffer[range])
            if run.allSatisfy({ $0 < 0x80 }) { return String(decoding: run, as: UTF8.self) }
            guard let text = String(validating: run, as: UTF8.self) else {
                throw error("the string is not valid UTF-8", at: range.lowerBound)
            }
            return text
        }
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            true
        default: false
        }
    }

    mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        // Four hex digits exactly: `UInt32(_:radix:)` alone would take a sign (`\u+041`).
        guard index + 4 <= bytes.count, bytes[index..<index + 4].allSatisfy({ Self.isHexDigit($0) }),
            let value = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16)
        else { throw error("expected four hex digits after \\u") }
        index += 4
        return value
    }
}

// MARK: Serialising

extension JSONValue {
    /// The value as JSON text: pretty-printed with two-space indents, or compact.
    public func serialized(pretty: Bool = true) -> String {
        String(decoding: serializedBytes(pretty: pretty), as: UTF8.self)
    }

    /// The value as UTF-8 JSON text.
    public func serializedBytes(pretty: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(to: &out, pretty: pretty, indent: 0)
        return out
    }

    private static func newline(_ out: inout [UInt8], indent: Int) {
        out.append(10)
        out.append(contentsOf: repeatElement(32, count: indent * 2))
    }

    fileprivate func write(to out: inout [UInt8], pretty: Bool, indent: Int) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): out.append(contentsOf: n.utf8)
        case .string(let s): Self.writeString(s, to: &out)
        case .array(let elements):
            if elements.isEmpty {
                out.append(contentsOf: "[]".utf8)
                return
            }
            out.append(UInt8(ascii: "["))
            for (i, element) in elements.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                if pretty { Self.newline(&out, indent: indent + 1) }
                element.write(to: &out, pretty: pretty, indent: indent + 1)
            }
            if pretty { Self.newline(&out, indent: indent) }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            if members.isEmpty {
                out.append(contentsOf: "{}".utf8)
                return
            }
            out.append(UInt8(ascii: "{"))
            for (i, member) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                if pretty { Self.newline(&out, indent: indent + 1) }
                Self.writeString(member.key, to: &out)
                out.append(UInt8(ascii: ":"))
                if pretty { out.append(32) }
                member.value.write(to: &out, pretty: pretty, indent: indent + 1)
            }
            if pretty { Self.newline(&out, indent: indent) }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Appends `s` as a JSON string: runs that need no escape are copied whole.
    static func writeString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = s
        s.withUTF8 { bytes in
            var runStart = 0
            for (index, byte) in bytes.enumerated()
            where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                switch byte {
                case UInt8(ascii: "\""): out.append(contentsOf: [92, 34])
                case UInt8(ascii: "\\"): out.append(contentsOf: [92, 92])
                case 10: out.append(contentsOf: [92, UInt8(ascii: "n")])
                case 13: out.append(contentsOf: [92, UInt8(ascii: "r")])
                case 9: out.append(contentsOf: [92, UInt8(ascii: "t")])
                default:
                    let hex = Array("0123456789abcdef".utf8)
                    out.append(contentsOf: [92, UInt8(ascii: "u"), 48, 48, hex[Int(byte >> 4)], hex[Int(byte & 15)]])
                }
                runStart = index + 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
        out.append(UInt8(ascii: "\""))
    }
}

// MARK: RFC 7396 merge patch and RFC 6901 pointers

extension JSONValue {
    /// Applies an RFC 7396 JSON merge patch: members of an object patch are merged
    /// recursively, `null` removes a member, anything else replaces the target.
    ///
    /// Member names are compared by their Unicode scalars, as JSON compares them (not by
    /// canonical equivalence, as `String` does). Of members that share a name, the last is
    /// the one a reader sees (``subscript(_:)``, pointers): a patch of that name merges into
    /// it and drops the others, and `null` removes them all. In the patch, too, only the
    /// last member of a name counts.
    public func merging(patch: JSONValue) -> JSONValue {
        guard case .object(let patchMembers) = patch else { return patch }
        var existing: [(key: String, value: JSONValue)] = []
        if case .object(let members) = self { existing = members }
        // One pass over each side, names looked up by their bytes: a patch of many names
        // over an object of many members is not compared member by member for each name.
        var seen = Set<[UInt8]>()
        let lastOfEachName = patchMembers.reversed().filter { seen.insert(Array($0.key.utf8)).inserted }.reversed()
        var patches: [[UInt8]: JSONValue] = [:]
        for (key, value) in lastOfEachName { patches[Array(key.utf8)] = value }
        var lastIndex: [[UInt8]: Int] = [:]
        for (index, member) in existing.enumerated() where !patches.isEmpty {
            let name = Array(member.key.utf8)
            if patches[name] != nil { lastIndex[name] = index }
        }
        var members: [(key: String, value: JSONValue)] = []
        members.reserveCapacity(existing.count + lastOfEachName.count)
        for (index, member) in existing.enumerated() {
            guard !lastIndex.isEmpty, case let name = Array(member.key.utf8), let patch = patches[name] else {
                members.append(member)
                continue
            }
            // `null` removes every member of the name; else the last one takes the patch
            // and the others go.
            if patch != .null, lastIndex[name] == index {
                members.append((member.key, member.value.merging(patch: patch)))
            }
        }
        for (key, value) in lastOfEachName where value != .null && lastIndex[Array(key.utf8)] == nil {
            members.append((key, JSONValue.null.merging(patch: value)))
        }
        return .object(members)
    }

    /// A pointer that is not valid RFC 6901 syntax, or names nothing in the value.
    public struct PointerError: Error, Sendable, Equatable, CustomStringConvertible {
        public var pointer: String
        public var message: String
        /// The pointer itself is not one (no leading `/`, a bad `~` escape), as opposed
        /// to one that designates nothing in this value.
        public var isMalformed = false
        public var description: String { "JSON pointer '\(pointer)': \(message)" }
    }

    /// The value an RFC 6901 JSON pointer (`/a/0/b~1c`) designates; `""` is the whole value.
    /// The pointer is read as Unicode scalars: `/` separates tokens even before a combining
    /// mark, and a `~` followed by anything but `0` or `1` is an error.
    public func value(at pointer: String) throws(PointerError) -> JSONValue {
        if pointer.isEmpty { return self }
        let scalars = pointer.unicodeScalars
        guard scalars.first == "/" else {
            throw PointerError(pointer: pointer, message: "must be empty or start with '/'", isMalformed: true)
        }
        var current = self
        var walked = ""
        for rawToken in scalars.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            guard let token = Self.unescape(rawToken) else {
                throw PointerError(pointer: pointer, message: "'~' must be followed by 0 or 1", isMalformed: true)
            }
            walked += "/" + String(Substring(rawToken))
            switch current {
            case .object:
                guard let next = current[token] else {
                    throw PointerError(pointer: pointer, message: "no member '\(token)' at \(walked)")
                }
                current = next
            case .array(let elements):
                guard let i = Int(token), String(i) == token, i >= 0 else {
                    throw PointerError(pointer: pointer, message: "'\(token)' is not an array index at \(walked)")
                }
                guard i < elements.count else {
                    throw PointerError(
                        pointer: pointer,
                        message: "index \(i) is past the end (\(elements.count) elements) at \(walked)")
                }
                current = elements[i]
            default:
                throw PointerError(
                    pointer: pointer, message: "\(walked) goes inside a value that is not an object or array")
            }
        }
        return current
    }

    /// A reference token with `~1` read as `/` and `~0` as `~`; `nil` for any other `~`.
    private static func unescape(_ token: Substring.UnicodeScalarView) -> String? {
        var result = String.UnicodeScalarView()
        var afterTilde = false
        for scalar in token {
            if afterTilde {
                switch scalar {
                case "0": result.append("~")
                case "1": result.append("/")
                default: return nil
                }
                afterTilde = false
            } else if scalar == "~" {
                afterTilde = true
            } else {
                result.append(scalar)
            }
        }
        return afterTilde ? nil : String(result)
    }
}

// MARK: Writing without a value tree

/// Writes compact JSON straight to bytes, for replies sent often enough that building a
/// ``JSONValue`` first would cost more than the rest of the request. The output is the
/// same as serialising the equivalent value.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []
    /// Whether the next element is the first in its container (or follows a key).
    private var first = true

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    /// A writer that appends to `bytes` (which may hold earlier lines).
    public init(appendingTo bytes: consuming [UInt8]) { self.bytes = bytes }

    /// The bytes written, leaving the writer empty.
    public mutating func take() -> [UInt8] {
        defer {
            bytes = []
            first = true
        }
        return bytes
    }

    /// Ends a line of JSON text: what follows is a new value, not a next element.
    public mutating func endLine() {
        bytes.append(10)
        first = true
    }

    private mutating func separate() {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
    }

    public mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        first = true
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        first = false
    }

    public mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        first = true
    }

    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        first = false
    }

    /// A member's key, a literal that needs no escaping; its value is written next.
    public mutating func key(_ key: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        first = true
    }

    public mutating func string(_ value: String) {
        separate()
        JSONValue.writeString(value, to: &bytes)
    }

    /// A string whose bytes need no escaping (ASCII without quotes, backslashes or controls).
    public mutating func plainString(_ text: UnsafeBufferPointer<UInt8>) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: text)
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func integer(_ value: Int) { integer(magnitude: UInt64(value.magnitude), negative: value < 0) }

    public mutating func integer(_ value: UInt64) { integer(magnitude: value, negative: false) }

    private mutating func integer(magnitude: UInt64, negative: Bool) {
        separate()
        var magnitude = magnitude
        // 20 digits hold any UInt64; the sign comes first.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = 20
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if negative { bytes.append(UInt8(ascii: "-")) }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start..<20]))
        }
    }

    public mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    public mutating func null() {
        separate()
        bytes.append(contentsOf: "null".utf8)
    }

    public mutating func value(_ value: JSONValue) {
        separate()
        value.write(to: &bytes, pretty: false, indent: 0)
    }

    /// A value given as its JSON text, written as it is.
    public mutating func json(_ text: [UInt8]) {
        separate()
        bytes.append(contentsOf: text)
    }

    /// A value given as its JSON text, written as it is.
    public mutating func json(_ text: UnsafeRawBufferPointer) {
        separate()
        bytes.append(contentsOf: text)
    }

    /// A number as ``JSONValue/init(_:)-(Double)`` gives it: whole numbers below 10¹⁵
    /// without a fraction, others as Swift prints them, `null` for what is not finite.
    public mutating func number(_ value: Double) {
        if value.isFinite && value == value.rounded() && abs(value) < 1e15 {
            integer(Int(Int64(value)))
            return
        }
        separate()
        bytes.append(contentsOf: (value.isFinite ? String(value) : "null").utf8)
    }
}
