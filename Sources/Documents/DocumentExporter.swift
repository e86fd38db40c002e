import Foundation
import Posix

/// Why an export did not happen.
public enum DocumentExportError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The collection of documents was empty.
    case noDocuments
    /// The destination is missing or not a directory.
    case destinationNotADirectory(String)
    /// A document declares no writable content type.
    case noWritableContentType(document: String)
    /// A writer received a snapshot of another type than its document's.
    case snapshotTypeMismatch(expected: String, got: String)
    /// `filenames` has a different count from `documents`.
    case filenameCountMismatch(documents: Int, filenames: Int)
    /// A file name is empty, `.`/`..`, or contains `/` or a NUL byte.
    case invalidFilename(String)

    public var description: String {
        switch self {
        case .noDocuments: "there are no documents to export"
        case .destinationNotADirectory(let path): "the export destination '\(path)' is not a directory"
        case .noWritableContentType(let document): "the document type \(document) declares no writable content type"
        case .snapshotTypeMismatch(let expected, let got):
            "the writer expected a snapshot of type \(expected), got \(got)"
        case .filenameCountMismatch(let documents, let filenames):
            "\(documents) documents were given \(filenames) file names"
        case .invalidFilename(let name): "'\(name)' is not a valid file name"
        }
    }
}

/// Exports documents to a directory with the semantics of SwiftUI's `fileExporter`,
/// without a dialog: a non-empty collection in, one URL per document out, in order.
///
/// The export is all-or-nothing: every document is first written completely and
/// durably under a temporary name, then all are renamed into place. Cancelling the
/// task before that point calls the cancellation handler (not the completion handler)
/// and leaves no file behind, half-written or whole.
public struct DocumentExporter: Sendable {
    /// How far an export has got.
    public struct Progress: Sendable, Hashable {
        public enum Phase: String, Sendable, Hashable {
            /// Documents are being written under temporary names.
            case writing
            /// The written documents are being renamed into place.
            case committing
            case finished
        }

        public var phase: Phase
        /// Documents written (while `writing`) or put in place (while `committing`).
        public var completed: Int
        public var total: Int
        /// The destination of the document just handled.
        public var url: URL?

        /// From 0 to 1: writing counts for 90 %, committing for the rest.
        public var fractionCompleted: Double {
            guard total > 0 else { return 1 }
            switch phase {
            case .writing: return 0.9 * Double(completed) / Double(total)
            case .committing: return 0.9 + 0.1 * Double(completed) / Double(total)
            case .finished: return 1
            }
        }
    }

    /// The directory documents are exported into.
    public var destination: URL
    /// The content types to export as, preferred first; empty means each document's own
    /// writable types. A document that cannot write any of them is exported as its first
    /// writable type.
    public var contentTypes: [UTType]
    /// The base name of a document given no file name.
    public var defaultFilename: String

    public init(destination: URL, contentTypes: [UTType] = [], defaultFilename: String = "Untitled") {
        self.destination = destination
        self.contentTypes = contentTypes
        self.defaultFilename = defaultFilename
    }

    /// The type `Document` is exported as.
    @MainActor
    public func contentType<Document: WritableDocument>(for document: Document.Type) throws -> UTType {
        let writable = Document.writableContentTypes
        guard let first = writable.first else {
            throw DocumentExportError.noWritableContentType(document: String(describing: Document.self))
        }
        return contentTypes.first(where: { wanted in writable.contains(wanted) }) ?? first
    }

    /// Exports `documents`, calling exactly one of `onCompletion` (with the URLs in the
    /// documents' order, or the error) and `onCancellation` (when the task is cancelled
    /// before the documents are put in place).
    ///
    /// - Parameters:
    ///   - documents: A non-empty collection.
    ///   - filenames: One name per document; a name without the content type's
    ///     extension gets it. Default: ``defaultFilename``. Names that repeat within
    ///     the export get " 2", " 3", … before the extension.
    ///   - progress: Called after each document is written and after each is put in place.
    @MainActor
    public func export<C: Collection>(
        documents: C,
        filenames: [String]? = nil,
        progress: (@MainActor (Progress) -> Void)? = nil,
        onCompletion: @MainActor (Result<[URL], any Error>) -> Void,
        onCancellation: (@MainActor () -> Void)? = nil
    ) async where C.Element: WritableDocument, C.Element.Writer.Destination == URL {
        do {
            let urls = try await export(documents: documents, filenames: filenames, progress: progress)
            onCompletion(.success(urls))
        } catch is CancellationError {
            onCancellation?()
        } catch {
            onCompletion(.failure(error))
        }
    }

    /// Exports `documents` and returns one URL per document, in order.
    ///
    /// - Throws: `CancellationError` when the task is cancelled before the documents
    ///   are put in place (nothing is left behind); ``DocumentExportError``;
    ///   ``DocumentError`` for file-system failures.
    @MainActor
    public func export<C: Collection>(
        documents: C,
        filenames: [String]? = nil,
        progress: (@MainActor (Progress) -> Void)? = nil
    ) async throws -> [URL] where C.Element: WritableDocument, C.Element.Writer.Destination == URL {
        let prepared = try await prepareExport(documents: documents, filenames: filenames, progress: progress)
        try Task.checkCancellation()
        try prepared.commit(progress: progress)
        return prepared.urls
    }

    /// Writes every document completely and durably under a temporary name beside its
    /// destination, without putting any in place: ``PreparedExport/commit(progress:)``
    /// does that, ``PreparedExport/discard()`` (or releasing it) removes them. Lets a
    /// caller make several exports one all-or-nothing step.
    @MainActor
    public func prepareExport<C: Collection>(
        documents: C,
        filenames: [String]? = nil,
        progress: (@MainActor (Progress) -> Void)? = nil
    ) async throws -> PreparedExport where C.Element: WritableDocument, C.Element.Writer.Destination == URL {
        guard !documents.isEmpty else { throw DocumentExportError.noDocuments }
        if let filenames, filenames.count != documents.count {
            throw DocumentExportError.filenameCountMismatch(documents: documents.count, filenames: filenames.count)
        }
        let directoryPath = destination.path
        guard
            (try? FileDescriptor.currentWorkingDirectory.status(of: directoryPath, followSymlinks: true))?.kind
                == .directory
        else { throw DocumentExportError.destinationNotADirectory(directoryPath) }

        let contentType = try contentType(for: C.Element.self)
        let names = try uniqueFilenames(
            filenames ?? Array(repeating: defaultFilename, count: documents.count), contentType: contentType)
        let export = PreparedExport()
        for (index, document) in documents.enumerated() {
            try Task.checkCancellation()
            let url = destination.appendingPathComponent(names[index], isDirectory: false)
            let snapshot = try await document.snapshot(contentType: contentType)
            let writer = document.writer(configuration: .init(contentType: contentType, existingFile: nil))
            export.writes.append(try await writer.prepare(snapshot, for: url))
            export.urls.append(url)
            progress?(Progress(phase: .writing, completed: index + 1, total: documents.count, url: url))
        }
        return export
    }

    private func uniqueFilenames(_ requested: [String], contentType: UTType) throws -> [String] {
        var used: Set<String> = []
        return try requested.map { name in
            guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), !name.utf8.contains(0) else {
                throw DocumentExportError.invalidFilename(name)
            }
            var base = name
            var ext = ""
            if let preferred = contentType.preferredFilenameExtension {
                if PathName.pathExtension(name).lowercased() == preferred {
                    base = PathName.splitExtension(name).base
                }
                ext = "." + preferred
            }
            var candidate = base + ext
            var counter = 2
            while used.contains(candidate) {
                candidate = "\(base) \(counter)\(ext)"
                counter += 1
            }
            used.insert(candidate)
            return candidate
        }
    }
}

/// Documents written under temporary names by ``DocumentExporter/prepareExport(documents:filenames:progress:)``,
/// waiting to be put in place. Released without a commit, they are removed.
public final class PreparedExport {
    /// One destination per document, in order.
    public internal(set) var urls: [URL] = []
    var writes: [PreparedWrite] = []
    /// The writes put in place by ``commitWithoutReplacing(progress:)``, for ``takeBack()``.
    private var committed: [PreparedWrite] = []

    init() {}

    /// Renames every document into place, in order.
    @MainActor
    public func commit(progress: (@MainActor (DocumentExporter.Progress) -> Void)? = nil) throws {
        for (index, write) in writes.enumerated() {
            try write.commit()
            progress?(.init(phase: .committing, completed: index + 1, total: writes.count, url: urls[index]))
        }
        writes = []
        progress?(.init(phase: .finished, completed: urls.count, total: urls.count, url: nil))
    }

    /// Renames every document into place, in order, replacing nothing: a name something
    /// is at already (another file, or an earlier document of the export given the same
    /// name) gets " 2", " 3", … before its extension. ``urls`` says where each went.
    ///
    /// All or nothing: when one cannot be put in place, those put before it are taken
    /// back (``takeBack()``; the names were free, so the directory is as it was) and the
    /// rest discarded, then the error is thrown.
    @MainActor
    public func commitWithoutReplacing(progress: (@MainActor (DocumentExporter.Progress) -> Void)? = nil) throws {
        for (index, write) in writes.enumerated() {
            let (base, ext) = PathName.splitExtension(urls[index].lastPathComponent)
            do {
                let path = try write.commitWithoutReplacing { counter in
                    ext.isEmpty ? "\(base) \(counter)" : "\(base) \(counter).\(ext)"
                }
                urls[index] = URL(fileURLWithPath: path)
            } catch {
                // This one too: its rename may have been made before what failed (the
                // directory's sync).
                committed = Array(writes[...index])
                takeBack()
                discard()
                throw error
            }
            progress?(.init(phase: .committing, completed: index + 1, total: writes.count, url: urls[index]))
        }
        committed = writes
        writes = []
        progress?(.init(phase: .finished, completed: urls.count, total: urls.count, url: nil))
    }

    /// Takes back what ``commitWithoutReplacing(progress:)`` put in place, last first:
    /// each document still there as it was put is removed (its name was free before), so
    /// that a batch of exports whose later one failed leaves nothing behind. What cannot
    /// be taken back (changed or removed since, or a removal that fails) is left.
    public func takeBack() {
        for write in committed.reversed() { _ = try? write.takeBack() }
        committed = []
    }

    /// Removes every temporary document; no destination is touched.
    public func discard() {
        for write in writes { write.discard() }
        writes = []
    }

    deinit { discard() }
}
