import Control
import Documents
import Foundation

/// An edit the engine applies to a document (the control protocol's edit commands).
public enum DocumentEdit: Sendable, Equatable {
    /// Replace the whole text of a text document.
    case setText(String)
    /// Add text at the end of a text document.
    case append(String)
    /// Replace `length` UTF-8 bytes starting at byte `offset` of a text document.
    case replace(offset: Int, length: Int, with: String)
    /// Replace a JSON document with this JSON text.
    case setJSON(String)
    /// Apply an RFC 7396 merge patch (JSON text) to a JSON document.
    case mergePatch(String)
    /// Create or replace a member file of a package document.
    case putMember(String, Data)
    /// Remove a member file of a package document.
    case removeMember(String)
    /// Replace the contents with these bytes, read as the document's file.
    case setData(Data)

    /// The command's name, for errors.
    public var name: String {
        switch self {
        case .setText: "set"
        case .append: "append"
        case .replace: "replace"
        case .setJSON: "set"
        case .mergePatch: "patch"
        case .putMember: "put-member"
        case .removeMember: "remove-member"
        case .setData: "set"
        }
    }
}

/// What to read from a document.
public enum DocumentQuery: Sendable, Equatable {
    /// The whole document: text, JSON text, or bytes.
    case contents
    /// The value at an RFC 6901 pointer of a JSON document.
    case jsonPointer(String)
    /// One member file of a package.
    case member(String)
    /// The member files of a package.
    case members
}

/// What a query returns.
public enum QueryResult: Sendable, Equatable {
    case text(String)
    case json(JSONValue)
    case data(Data)
    case members([String])
}

/// Why an edit or a query was refused by the document.
public struct DocumentContentError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The edit or query does not apply to this kind of document.
        case unsupported
        /// The content is not valid (JSON syntax, UTF-8, a range out of bounds).
        case invalid
        /// A member or pointer names nothing.
        case notFound
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// A document the engine can hold in memory, edit, query and save.
///
/// Every requirement has a default, so any `FileDocument & Sendable` value type becomes
/// one with an empty extension; the defaults let the control protocol replace the
/// whole document with bytes (`set`) and read it back (`get`).
public protocol AutosaveDocument: FileDocument, Sendable {
    /// Applies `edit`. `existingFile` is the wrapper last read or saved.
    ///
    /// An edit that gives the whole document (`setText`, `setJSON`, `setData`) must leave
    /// the same document whatever it held before: the journal's replay applies a
    /// document's edits from the last such one on.
    mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws
    /// Answers `query`.
    func read(_ query: DocumentQuery, existingFile: FileWrapper?) throws -> QueryResult
    /// Called on the live document after `snapshot` (an earlier copy of it) was saved,
    /// so it can forget what is now on disk.
    mutating func didSave(_ snapshot: Self)
}

extension AutosaveDocument {
    public mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws {
        guard case .setData(let data) = edit else {
            throw DocumentContentError(.unsupported, "\(edit.name) does not apply to \(Self.self) documents")
        }
        let type = Self.readableContentTypes.first ?? .data
        self = try Self(configuration: .init(contentType: type, file: FileWrapper(regularFileWithContents: data)))
    }

    public func read(_ query: DocumentQuery, existingFile: FileWrapper?) throws -> QueryResult {
        guard query == .contents else {
            throw DocumentContentError(.unsupported, "this query does not apply to \(Self.self) documents")
        }
        let type = Self.writableContentTypes.first ?? .data
        let wrapper = try fileWrapper(configuration: .init(contentType: type, existingFile: existingFile))
        guard let data = wrapper.regularFileContents else {
            throw DocumentContentError(.unsupported, "\(Self.self) documents are not single files")
        }
        return .data(data)
    }

    public mutating func didSave(_ snapshot: Self) {}
}
