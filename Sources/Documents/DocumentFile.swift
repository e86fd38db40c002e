import Foundation

/// Reads and saves ``FileDocument`` values at a location the way a document-based app
/// does: `init(configuration:)` on read, `fileWrapper(configuration:)` with the
/// previous wrapper as `existingFile` on save, and every byte through ``DurableWriter``.
public enum DocumentFile {
    /// The type of the file at `url` among `Document`'s readable types, judged by its
    /// extension; the first readable type when the extension says nothing.
    public static func contentType<Document: FileDocument>(of url: URL, for document: Document.Type) -> UTType? {
        let readable = Document.readableContentTypes
        let ext = url.pathExtension
        if !ext.isEmpty {
            for type in readable {
                if let byExtension = UTType(filenameExtension: ext, conformingTo: type), byExtension.conforms(to: type)
                {
                    return readable.first { byExtension.conforms(to: $0) } ?? type
                }
            }
        }
        return readable.first
    }

    /// Reads a `Document` from `url`.
    ///
    /// - Returns: The document and the wrapper it was read from: pass that wrapper as
    ///   `existingFile` to the first ``save(_:to:contentType:existingFile:options:writer:)``.
    public static func read<Document: FileDocument>(
        _ document: Document.Type, from url: URL, contentType: UTType? = nil, options: FileWrapper.ReadingOptions = []
    ) throws -> (document: Document, file: FileWrapper) {
        let file = try FileWrapper(url: url, options: options)
        let type = contentType ?? self.contentType(of: url, for: document) ?? .data
        let value = try Document(configuration: .init(contentType: type, file: file))
        return (value, file)
    }

    /// Saves `document` to `url` durably.
    ///
    /// - Parameters:
    ///   - existingFile: The wrapper last read or written for this document, `nil` if never saved.
    ///   - options: `.atomic` replaces a package as a whole instead of updating it in place.
    /// - Returns: The wrapper written (the next save's `existingFile`) and what was written.
    @discardableResult
    public static func save<Document: FileDocument>(
        _ document: Document, to url: URL, contentType: UTType, existingFile: FileWrapper?,
        options: FileWrapper.WritingOptions = [], writer: DurableWriter = DurableWriter()
    ) throws -> (file: FileWrapper, report: DurableWriter.Report) {
        let file = try document.fileWrapper(configuration: .init(contentType: contentType, existingFile: existingFile))
        let report = try writer.write(file, to: url.path, options: options, originalContentsPath: url.path)
        return (file, report)
    }
}
