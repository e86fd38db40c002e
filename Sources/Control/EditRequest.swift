/// A `set` or `append` request with text, read straight from the request line's bytes
/// without building a value tree: the daemon's most frequent requests.
///
/// ``scan(_:)`` accepts only the plain form — one flat object with `cmd`, `doc`, `text`
/// and optionally `id`, each once, strings with at most the short escapes (`\n`, `\"`,
/// …). Anything else, valid or not, gives `nil`, and the line goes to the full parser,
/// which accepts every valid request and names what is wrong with the others.
public struct EditRequest: Sendable {
    public enum Command: Sendable {
        case set
        case append
    }

    /// The request's `id`, echoed in the reply.
    public var id: JSONValue?
    public var command: Command
    public var document: String
    public var text: String

    public static func scan(_ line: UnsafeRawBufferPointer) -> EditRequest? {
        var scanner = Scanner(bytes: line)
        return scanner.request()
    }

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        mutating func request() -> EditRequest? {
            guard take(UInt8(ascii: "{")) else { return nil }
            var id: JSONValue?
            var command: Command?
            var document: String?
            var text: String?
            while true {
                guard let key = key() else { return nil }
                switch key {
                case .id:
                    guard id == nil, let value = scalar() else { return nil }
                    id = value
                case .cmd:
                    guard command == nil, let value = commandName() else { return nil }
                    command = value
                case .doc:
                    guard document == nil, let value = string() else { return nil }
                    document = value
                case .text:
                    guard text == nil, let value = string() else { return nil }
                    text = value
                }
                if take(UInt8(ascii: ",")) { continue }
                guard take(UInt8(ascii: "}")) else { return nil }
                break
            }
            skipWhitespace()
            guard index == bytes.count, let command, let document, let text else { return nil }
            return EditRequest(id: id, command: command, document: document, text: text)
        }

        enum Key { case id, cmd, doc, text }

        /// The bytes between a pair of quotes, taken as they are (for names that need no escapes).
        mutating func quoted() -> UnsafeRawBufferPointer? {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            let start = index + 1
            guard let end = bytes[start...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
            index = end + 1
            return UnsafeRawBufferPointer(rebasing: bytes[start..<end])
        }

        /// A member name and its colon.
        mutating func key() -> Key? {
            guard let name = quoted(), take(UInt8(ascii: ":")) else { return nil }
            switch (name.count, name.first) {
            case (2, UInt8(ascii: "i")) where name[1] == UInt8(ascii: "d"): return .id
            case (3, UInt8(ascii: "c")) where name[1] == UInt8(ascii: "m") && name[2] == UInt8(ascii: "d"): return .cmd
            case (3, UInt8(ascii: "d")) where name[1] == UInt8(ascii: "o") && name[2] == UInt8(ascii: "c"): return .doc
            case (4, UInt8(ascii: "t"))
            where name[1] == UInt8(ascii: "e") && name[2] == UInt8(ascii: "x") && name[3] == UInt8(ascii: "t"):
                return .text
            default: return nil
            }
        }

        /// `"set"` or `"append"`, compared as bytes.
        mutating func commandName() -> Command? {
            guard let name = quoted() else { return nil }
            if name.count == 3, name[0] == UInt8(ascii: "s"), name[1] == UInt8(ascii: "e"), name[2] == UInt8(ascii: "t")
            {
                return .set
            }
            if name.count == 6, name[0] == UInt8(ascii: "a"), name.elementsEqual("append".utf8) { return .append }
            return nil
        }

        /// A string, a number, `true`, `false` or `null` (the forms an `id` takes here).
        mutating func scalar() -> JSONValue? {
            skipWhitespace()
            guard index < bytes.count else { return nil }
            let first = bytes[index]
            if first == UInt8(ascii: "\"") { return string().map(JSONValue.string) }
            let start = index
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == 0x20 || byte == 0x09 { break }
                index += 1
            }
            let token = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
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
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            index += 1
            let start = index
            var ascii = true
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let run = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
                    index += 1
                    return ascii ? String(decoding: run, as: UTF8.self) : String(validating: run, as: UTF8.self)
                }
                if byte == UInt8(ascii: "\\") { return escapedString(from: start) }
                if byte < 0x20 { return nil }
                if byte >= 0x80 { ascii = false }
                index += 1
            }
            return nil
        }

        /// The rest of a string that has escapes, from its first byte at `start`.
        mutating func escapedString(from start: Int) -> String? {
            var decoded: [UInt8] = []
            decoded.reserveCapacity(index - start + 64)
            decoded.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: decoded, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escape = bytes[index]
                    index += 1
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

        mutating func take(_ byte: UInt8) -> Bool {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }
    }
}
