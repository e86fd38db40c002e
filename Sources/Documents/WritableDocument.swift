import Foundation

/// A document written from an asynchronous snapshot by a writer, with the shape of
/// SwiftUI's `WritableDocument`: the document is main-actor isolated, its snapshot is
/// taken there, and the writer serialises that snapshot elsewhere.
@MainActor
public protocol WritableDocument {
    /// The document's state as the writer needs it.
    associatedtype Snapshot: Sendable
    /// What turns a snapshot into bytes at a destination.
    associatedtype Writer: DocumentWriter

    /// The types the document can be written as, preferred first.
    static var writableContentTypes: [UTType] { get }

    /// Captures the document's state for `contentType`.
    func snapshot(contentType: UTType) async throws -> Snapshot

    /// The writer for one write described by `configuration`.
    nonisolated func writer(configuration: sending WriteConfiguration) -> sending Writer

    typealias WriteConfiguration = WritableDocumentWriteConfiguration<Self>
}

/// What a ``WritableDocument`` is written with: the content type and the wrapper last
/// written for it (`nil` when never saved).
public struct WritableDocumentWriteConfiguration<Document: WritableDocument>: Sendable {
    public let contentType: UTType
    public let existingFile: FileWrapper?

    public nonisolated init(contentType: UTType, existingFile: FileWrapper?) {
        self.contentType = contentType
        self.existingFile = existingFile
    }
}

/// Turns a document snapshot into a durable write at a destination.
public protocol DocumentWriter: Sendable {
    associatedtype Destination

    /// Serialises `snapshot` and writes it completely and durably beside `destination`
    /// without replacing anything; the result's ``PreparedWrite/commit()`` puts it in place.
    ///
    /// - Throws: ``DocumentExportError/snapshotTypeMismatch`` when `snapshot` is not the
    ///   document's snapshot type; ``DocumentError`` for file-system failures.
    func prepare(_ snapshot: any Sendable, for destination: Destination) async throws -> PreparedWrite
}

extension DocumentWriter {
    /// Serialises `snapshot` and writes it to `destination` durably.
    public func write(_ snapshot: any Sendable, to destination: Destination) async throws {
        try await prepare(snapshot, for: destination).commit()
    }
}

/// A writer that builds a ``FileWrapper`` from the snapshot and the previous wrapper,
/// then writes it through ``DurableWriter``.
public struct FileWrapperDocumentWriter: DocumentWriter {
    public typealias Destination = URL

    /// The type being written.
    public let contentType: UTType
    /// The wrapper last written for the document, handed to the closure as `previous`.
    public let existingFile: FileWrapper?
    private let makeWrapper: @Sendable (any Sendable, FileWrapper?) throws -> FileWrapper
    private let durableWriter: DurableWriter

    /// A writer for one write of a `Document`.
    ///
    /// - Parameters:
    ///   - configuration: The write's configuration, as `writer(configuration:)` received it.
    ///   - writer: The disk writer (its symbolic-link policy).
    ///   - body: Builds the wrapper from the snapshot and the previous wrapper.
    public init<Document: WritableDocument>(
        _ configuration: WritableDocumentWriteConfiguration<Document>,
        writer: DurableWriter = DurableWriter(),
        _ body: @escaping @Sendable (Document.Snapshot, FileWrapper?) throws -> FileWrapper
    ) {
        contentType = configuration.contentType
        existingFile = configuration.existingFile
        durableWriter = writer
        makeWrapper = { snapshot, previous in
            guard let typed = snapshot as? Document.Snapshot else {
                throw DocumentExportError.snapshotTypeMismatch(
                    expected: String(describing: Document.Snapshot.self), got: String(describing: type(of: snapshot)))
            }
            return try body(typed, previous)
        }
    }

    /// The wrapper the closure builds for `snapshot`.
    public func fileWrapper(for snapshot: any Sendable) throws -> FileWrapper {
        try makeWrapper(snapshot, existingFile)
    }

    public func prepare(_ snapshot: any Sendable, for destination: URL) async throws -> PreparedWrite {
        let wrapper = try fileWrapper(for: snapshot)
        return try durableWriter.prepare(wrapper, to: destination.path, options: [.withNameUpdating])
    }
}
