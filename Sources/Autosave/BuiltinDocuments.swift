import Control
import Documents
import Foundation

// MARK: Plain text

/// A UTF-8 text document (`.txt`, `.md`, and every type conforming to plain text).
public struct PlainTextDocument: AutosaveDocument {
    public static var readableContentTypes: [UTType] { [.plainText] }

    public var text: String

    public init(text: String = "") { self.text = text }

    public init(configuration: ReadConfiguration) throws {
        let data = configuration.file.regularFileContents ?? Data()
        text = try Self.decode(data)
    }

    static func decode(_ data: Data) throws -> String {
        if let text = String(validating: data, as: UTF8.self) { return text }
        var offset = 0
        var iterator = data.makeIterator()
        var decoder = UTF8()
        var valid = 0
        loop: while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar):
                valid += UTF8.width(scalar)
            case .emptyInput: break loop
            case .error:
                offset = valid
                break loop
            }
        }
        throw DocumentContentError(.invalid, "the text is not valid UTF-8 (first bad byte at offset \(offset))")
    }

    public func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
        FileWrapper(regularFileWithText: text)
    }

    public mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws {
        switch edit {
        case .setText(let new):
            text = new
        case .setData(let data):
            text = try Self.decode(data)
        case .append(let more):
            text += more
        case .replace(let offset, let length, let replacement):
            let utf8 = text.utf8
            guard offset >= 0, length >= 0, offset <= utf8.count, length <= utf8.count - offset else {
                // Described without adding the two: they come from a request and may be
                // anything an Int holds.
                let size = "\(utf8.count) \(utf8.count == 1 ? "byte" : "bytes")"
                throw DocumentContentError(
                    .invalid, "offset \(offset) and length \(length) are outside the text (\(size))")
            }
            let start = utf8.index(utf8.startIndex, offsetBy: offset)
            let end = utf8.index(start, offsetBy: length)
            guard start.samePosition(in: text.unicodeScalars) != nil, end.samePosition(in: text.unicodeScalars) != nil
            else {
                throw DocumentContentError(
                    .invalid, "the range \(offset)..<\(offset + length) splits a UTF-8 character")
            }
            text.replaceSubrange(start..<end, with: replacement)
        default:
            throw DocumentContentError(.unsupported, "\(edit.name) does not apply to text documents")
        }
    }

    public func read(_ query: DocumentQuery, existingFile: FileWrapper?) throws -> QueryResult {
        guard query == .contents else {
            throw DocumentContentError(.unsupported, "text documents answer only a plain get")
        }
        return .text(text)
    }
}

// MARK: JSON

/// A JSON document: set, RFC 7396 merge patch, get by RFC 6901 pointer. Text that was
/// set is saved as given; a patched document is saved pretty-printed, members in order.
public struct JSONDocument: AutosaveDocument {
    public static var readableContentTypes: [UTType] { [.json] }

    public private(set) var value: JSONValue
    /// The text as set or read, until a patch changes the value.
    private var source: String?

    public init(value: JSONValue) {
        self.value = value
        source = nil
    }

    public init(configuration: ReadConfiguration) throws {
        let data = configuration.file.regularFileContents ?? Data()
        try self.init(text: PlainTextDocument.decode(data))
    }

    public init(text: String) throws {
        do { value = try JSONValue(parsing: text) } catch { throw DocumentContentError(.invalid, "\(error)") }
        source = text
    }

    public var text: String { source ?? value.serialized() + "\n" }

    public func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
        FileWrapper(regularFileWithText: text)
    }

    public mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws {
        switch edit {
        case .setJSON(let text), .setText(let text):
            self = try JSONDocument(text: text)
        case .setData(let data):
            self = try JSONDocument(text: PlainTextDocument.decode(data))
        case .mergePatch(let text):
            let patch: JSONValue
            do { patch = try JSONValue(parsing: text) } catch {
                throw DocumentContentError(.invalid, "the patch is not valid JSON: \(error)")
            }
            value = value.merging(patch: patch)
            source = nil
        default:
            throw DocumentContentError(.unsupported, "\(edit.name) does not apply to JSON documents")
        }
    }

    public func read(_ query: DocumentQuery, existingFile: FileWrapper?) throws -> QueryResult {
        switch query {
        case .contents:
            return .text(text)
        case .jsonPointer(let pointer):
            do { return .json(try value.value(at: pointer)) } catch {
                throw DocumentContentError(error.isMalformed ? .invalid : .notFound, "\(error)")
            }
        default:
            throw DocumentContentError(.unsupported, "JSON documents answer a get or a get by pointer")
        }
    }
}

// MARK: Raw data

/// Bytes, kept as they are (any type without a more specific document).
public struct DataDocument: AutosaveDocument {
    public static var readableContentTypes: [UTType] { [.data] }

    public var data: Data

    public init(data: Data = Data()) { self.data = data }

    public init(configuration: ReadConfiguration) throws {
        data = configuration.file.regularFileContents ?? Data()
    }

    public func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
        FileWrapper(regularFileWithContents: data)
    }

    public mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws {
        switch edit {
        case .setData(let bytes): data = bytes
        case .setText(let text): data = Data(text.utf8)
        case .append(let text): data.append(contentsOf: Array(text.utf8))
        default: throw DocumentContentError(.unsupported, "\(edit.name) does not apply to raw data documents")
        }
    }

    public func read(_ query: DocumentQuery, existingFile: FileWrapper?) throws -> QueryResult {
        guard query == .contents else {
            throw DocumentContentError(.unsupported, "raw data documents answer only a plain get")
        }
        return .data(data)
    }
}
