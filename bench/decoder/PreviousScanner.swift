/// The scanner the daemon read plain `set` and `append` requests with before
/// ``RequestDecoder`` (Sources/Control/EditRequest.swift at 3a78146), kept unchanged
/// but for its name, for bench/decoder/main.swift to time beside the decoder.
///
/// A `set` or `append` request with text, read straight from the request line's bytes
/// without building a value tree: the daemon's most frequent requests.
///
/// ``scanRaw(_:)`` is the one scanner: it accepts only the plain form — one flat object
/// with `cmd`, `doc`, `text` and optionally `id`, each once, strings with at most the
/// short escapes (`\n`, `\"`, …). Anything else, valid or not, gives `nil`, and the line
/// goes to the full parser, which accepts every valid request and names what is wrong
/// with the others. ``scan(_:)`` is the same scanner with strings made for the id and path.
public struct PreviousEditRequest: Sendable {
    public enum Command: Sendable {
        case set
        case append
    }

    /// The request's `id`, echoed in the reply.
    public var id: JSONValue?
    public var command: Command
    public var document: String
    public var text: String

    public static func scan(_ line: UnsafeRawBufferPointer) -> PreviousEditRequest? {
        guard let raw = scanRaw(line) else { return nil }
        return PreviousEditRequest(id: raw.idValue, command: raw.command, document: raw.documentPath, text: raw.text)
    }

    /// A plain edit whose `id` and `doc` are left as the bytes of the line, for a caller
    /// that echoes the id and remembers the last document by its bytes: no string is made
    /// for either unless the path has escapes.
    public struct Raw {
        public var command: Command
        /// The id's JSON text as sent — a plain integer, `true`, `false`, `null`, or a
        /// string with its quotes (escapes as sent) — or `nil` without an id. Valid while the line is.
        public var id: UnsafeRawBufferPointer?
        /// The document's path between its quotes, as sent (escapes included). Valid while the line is.
        public var document: UnsafeRawBufferPointer
        /// The path, decoded, when it had escapes; `nil` when ``document`` is its UTF-8 as it is.
        public var decodedDocument: String?
        public var text: String

        /// The document's path as a string.
        public var documentPath: String { decodedDocument ?? String(decoding: document, as: UTF8.self) }

        /// The id as a value (as ``PreviousEditRequest/id``).
        public var idValue: JSONValue? { Self.idValue(id) }

        /// The value of an id's JSON text.
        public static func idValue(_ text: UnsafeRawBufferPointer?) -> JSONValue? {
            guard let text else { return nil }
            return try? JSONValue(parsing: Array(text))
        }
    }

    public static func scanRaw(_ line: UnsafeRawBufferPointer) -> Raw? {
        guard let base = line.baseAddress else { return nil }
        var scanner = Scanner(at: base, end: base + line.count)
        return scanner.rawRequest()
    }

    /// Reads through a raw pointer, one byte load at a time (no bounds checks beyond its own).
    private struct Scanner {
        var position: UnsafeRawPointer
        let end: UnsafeRawPointer

        init(at position: UnsafeRawPointer, end: UnsafeRawPointer) {
            self.position = position
            self.end = end
        }

        @inline(__always) func byte(_ at: UnsafeRawPointer) -> UInt8 { at.load(as: UInt8.self) }

        mutating func rawRequest() -> Raw? {
            var id: UnsafeRawBufferPointer?
            var command: Command?
            var document: UnsafeRawBufferPointer?
            var decodedDocument: String?
            var text: String?
            let complete = object { scanner, key in
                switch key {
                case .id:
                    guard id == nil, let value = scanner.rawScalar() else { return false }
                    id = value
                case .cmd:
                    guard command == nil, let value = scanner.commandName() else { return false }
                    command = value
                case .doc:
                    scanner.skipWhitespace()
                    guard document == nil, let (token, decoded) = scanner.stringToken() else { return false }
                    document = UnsafeRawBufferPointer(rebasing: token.dropFirst().dropLast())
                    decodedDocument = decoded
                case .text:
                    guard text == nil, let value = scanner.string() else { return false }
                    text = value
                }
                return true
            }
            guard complete, let command, let document, let text else { return nil }
            return Raw(command: command, id: id, document: document, decodedDocument: decodedDocument, text: text)
        }

        /// Reads a flat object to its end (and the whitespace after it), handing each
        /// member's key to `member`, which reads the value; `false` when `member` declines
        /// one or the object is malformed.
        @inline(__always)
        mutating func object(_ member: (inout Scanner, Key) -> Bool) -> Bool {
            guard take(UInt8(ascii: "{")) else { return false }
            while true {
                guard let key = key(), member(&self, key) else { return false }
                if take(UInt8(ascii: ",")) { continue }
                guard take(UInt8(ascii: "}")) else { return false }
                break
            }
            skipWhitespace()
            return position == end
        }

        /// A string's JSON text, quotes included, checked as ``string()`` checks it; with the
        /// decoded string when it is not its own UTF-8 (it has escapes).
        mutating func stringToken() -> (UnsafeRawBufferPointer, String?)? {
            guard position < end, byte(position) == UInt8(ascii: "\"") else { return nil }
            let start = position
            if let plain = plainASCII() { return (plain, nil) }
            position = start
            guard let decoded = string() else { return nil }
            let token = UnsafeRawBufferPointer(start: start, count: position - start)
            // Without escapes the bytes between the quotes are the path's UTF-8 (checked by `string()`).
            let escaped = token.contains(UInt8(ascii: "\\"))
            return (token, escaped ? decoded : nil)
        }

        /// An id's JSON text, in the forms ``scalar()`` reads.
        mutating func rawScalar() -> UnsafeRawBufferPointer? {
            skipWhitespace()
            guard position < end else { return nil }
            if byte(position) == UInt8(ascii: "\"") { return stringToken()?.0 }
            let start = position
            guard scalar() != nil else { return nil }
            return UnsafeRawBufferPointer(start: start, count: position - start)
        }

        /// A string of printable ASCII without escapes, quotes included: its bytes are its JSON text as any writer gives it.
        mutating func plainASCII() -> UnsafeRawBufferPointer? {
            guard position < end, byte(position) == UInt8(ascii: "\"") else { return nil }
            let start = position
            var at = position + 1
            while at < end {
                let byte = byte(at)
                if byte == UInt8(ascii: "\"") {
                    position = at + 1
                    return UnsafeRawBufferPointer(start: start, count: position - start)
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 || byte >= 0x7F { return nil }
                at += 1
            }
            return nil
        }

        enum Key { case id, cmd, doc, text }

        /// A member name and its colon: the name's bytes compared as they are (these names need no escapes).
        mutating func key() -> Key? {
            skipWhitespace()
            guard position < end, byte(position) == UInt8(ascii: "\"") else { return nil }
            let name = position + 1
            var close = name
            while close < end, byte(close) != UInt8(ascii: "\"") { close += 1 }
            guard close < end else { return nil }
            position = close + 1
            guard take(UInt8(ascii: ":")) else { return nil }
            switch (close - name, byte(name)) {
            case (2, UInt8(ascii: "i")) where byte(name + 1) == UInt8(ascii: "d"):
                return .id
            case (3, UInt8(ascii: "c"))
            where byte(name + 1) == UInt8(ascii: "m") && byte(name + 2) == UInt8(ascii: "d"):
                return .cmd
            case (3, UInt8(ascii: "d"))
            where byte(name + 1) == UInt8(ascii: "o") && byte(name + 2) == UInt8(ascii: "c"):
                return .doc
            case (4, UInt8(ascii: "t"))
            where byte(name + 1) == UInt8(ascii: "e") && byte(name + 2) == UInt8(ascii: "x")
                && byte(name + 3) == UInt8(ascii: "t"):
                return .text
            default: return nil
            }
        }

        /// `"set"` or `"append"`, compared as bytes.
        mutating func commandName() -> Command? {
            skipWhitespace()
            guard position < end, byte(position) == UInt8(ascii: "\"") else { return nil }
            let name = position + 1
            if end - name >= 4, byte(name) == UInt8(ascii: "s"), byte(name + 1) == UInt8(ascii: "e"),
                byte(name + 2) == UInt8(ascii: "t"), byte(name + 3) == UInt8(ascii: "\"")
            {
                position = name + 4
                return .set
            }
            if end - name >= 7, UnsafeRawBufferPointer(start: name, count: 7).elementsEqual("append\"".utf8) {
                position = name + 7
                return .append
            }
            return nil
        }

        /// A string, a number, `true`, `false` or `null` (the forms an `id` takes here).
        mutating func scalar() -> JSONValue? {
            skipWhitespace()
            guard position < end else { return nil }
            let first = byte(position)
            if first == UInt8(ascii: "\"") { return string().map(JSONValue.string) }
            let start = position
            while position < end {
                let byte = byte(position)
                if byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == 0x20 || byte == 0x09 { break }
                position += 1
            }
            let token = UnsafeRawBufferPointer(start: start, count: position - start)
            switch first {
            case UInt8(ascii: "t"): return token.elementsEqual("true".utf8) ? .bool(true) : nil
            case UInt8(ascii: "f"): return token.elementsEqual("false".utf8) ? .bool(false) : nil
            case UInt8(ascii: "n"): return token.elementsEqual("null".utf8) ? .null : nil
            default: break
            }
            // A plain integer; other numbers go to the full parser, which checks their form.
            guard !token.isEmpty, token.count <= 18 else { return nil }
            let digits = token[token.startIndex] == UInt8(ascii: "-") ? token.dropFirst() : token[...]
            guard !digits.isEmpty, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                digits.count == 1 || digits.first != 0x30
            else { return nil }
            return .number(String(decoding: token, as: UTF8.self))
        }

        /// A string value; `nil` for anything but a string, and for `\u` escapes.
        mutating func string() -> String? {
            skipWhitespace()
            guard position < end, byte(position) == UInt8(ascii: "\"") else { return nil }
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
                    return ascii ? String(decoding: run, as: UTF8.self) : String(validating: run, as: UTF8.self)
                }
                if byte == UInt8(ascii: "\\") { return escapedString(from: start) }
                if byte < 0x20 { return nil }
                if byte >= 0x80 { ascii = false }
                position += 1
            }
            return nil
        }

        /// The rest of a string that has escapes, from its first byte at `start`.
        mutating func escapedString(from start: UnsafeRawPointer) -> String? {
            var decoded: [UInt8] = []
            decoded.reserveCapacity(position - start + 64)
            decoded.append(contentsOf: UnsafeRawBufferPointer(start: start, count: position - start))
            while position < end {
                let byte = byte(position)
                position += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: decoded, as: UTF8.self)
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

        mutating func take(_ expected: UInt8) -> Bool {
            skipWhitespace()
            guard position < end, byte(position) == expected else { return false }
            position += 1
            return true
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
}
