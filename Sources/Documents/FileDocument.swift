/// A value-type document that reads and writes itself through file wrappers, with
/// SwiftUI's `FileDocument` requirements.
///
/// `fileWrapper(configuration:)` may run on a background task: take care not to touch
/// state that another task mutates.
public protocol FileDocument {
    /// The types the document can be read from.
    static var readableContentTypes: [UTType] { get }
    /// The types the document can be written as; by default the readable ones.
    static var writableContentTypes: [UTType] { get }

    /// Reads the document from `configuration.file`.
    init(configuration: ReadConfiguration) throws

    /// Serialises the document. Reuse `configuration.existingFile` (the wrapper last
    /// written or read) as the base of a package so unchanged children are not rewritten.
    func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper

    typealias ReadConfiguration = FileDocumentReadConfiguration
    typealias WriteConfiguration = FileDocumentWriteConfiguration
}

extension FileDocument {
    public static var writableContentTypes: [UTType] { readableContentTypes }
}

/// A reference-type document whose state is captured in a snapshot before it is
/// written, with SwiftUI's `ReferenceFileDocument` requirements (without
/// `ObservableObject`, which Linux lacks).
public protocol ReferenceFileDocument: AnyObject {
    associatedtype Snapshot

    static var readableContentTypes: [UTType] { get }
    static var writableContentTypes: [UTType] { get }

    init(configuration: ReadConfiguration) throws

    /// Captures the document's state; called where the document is isolated.
    func snapshot(contentType: UTType) throws -> Snapshot

    /// Serialises a snapshot; may run on a background task.
    func fileWrapper(snapshot: Snapshot, configuration: WriteConfiguration) throws -> FileWrapper

    typealias ReadConfiguration = FileDocumentReadConfiguration
    typealias WriteConfiguration = FileDocumentWriteConfiguration
}

extension ReferenceFileDocument {
    public static var writableContentTypes: [UTType] { readableContentTypes }
}

/// What a document reads from: the content type and the file wrapper.
public struct FileDocumentReadConfiguration: Sendable {
    /// The type of the file being read.
    public let contentType: UTType
    /// The file, as read from disk.
    public let file: FileWrapper

    public init(contentType: UTType, file: FileWrapper) {
        self.contentType = contentType
        self.file = file
    }
}

/// What a document writes with: the content type and the wrapper last written or read.
public struct FileDocumentWriteConfiguration: Sendable {
    /// The type to write.
    public let contentType: UTType
    /// The wrapper last written or read for this document; `nil` when it was never saved.
    public let existingFile: FileWrapper?

    public init(contentType: UTType, existingFile: FileWrapper?) {
        self.contentType = contentType
        self.existingFile = existingFile
    }
}
