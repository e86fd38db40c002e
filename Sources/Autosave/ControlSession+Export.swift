import Control
import Documents
import Foundation
import Posix

/// A store document as a ``WritableDocument`` for ``DocumentExporter``: its snapshot is
/// the document value, written with a copy of the wrapper its saves build on.
@MainActor
final class ExportableDocument<Document: AutosaveDocument>: WritableDocument {
    static var writableContentTypes: [UTType] { Document.writableContentTypes }

    let value: Document
    let existing: FileWrapper?
    /// The directory the export may write beneath: the store root, or the allowed export
    /// directory the destination lies in.
    let confinement: String

    init(value: Document, existing: FileWrapper?, confinement: String) {
        self.value = value
        self.existing = existing
        self.confinement = confinement
    }

    nonisolated func writer(configuration: sending WriteConfiguration) -> sending FileWrapperDocumentWriter {
        let base = existing?.copy()
        let type = configuration.contentType
        // Confined by descriptor: a directory swapped for a link after the destination
        // was checked cannot take the export elsewhere.
        let writer = DurableWriter(symlinkPolicy: .refuse, confinedTo: confinement)
        return FileWrapperDocumentWriter(configuration, writer: writer) { (snapshot: Document, _) in
            try snapshot.fileWrapper(configuration: .init(contentType: type, existingFile: base))
        }
    }

    func snapshot(contentType: UTType) async throws -> Document { value }
}

extension DocumentStore {
    /// What an export needs of a document: its value, type and saved wrapper. A document
    /// the store does not hold is read from its file for the export alone, not opened: an
    /// export refused for a later document leaves the store as it was.
    func exportSnapshot(_ path: String) throws(StoreError) -> (
        document: any AutosaveDocument, type: UTType, existing: FileWrapper?
    ) {
        let path = try DocumentPath.validate(path)
        if let entry = entries[path] { return (entry.document, entry.contentType, entry.existingFile) }
        let entry = try loadEntry(path)
        return (entry.document, entry.contentType, entry.existingFile)
    }
}

extension ControlSession {
    /// `export`: every document written under a temporary name beside its destination,
    /// then all renamed into place; cancelled (by `cancel` or the client leaving) before
    /// that, nothing is left behind.
    @MainActor
    func export(
        docs: Checked<[String]>, to: Checked<String>, type: Checked<String?>, id: LineBytes?
    ) async throws -> [String] {
        let paths = try docs.get()
        for path in paths { try server.checkBeneathRoot(path) }
        let (destination, confinement) = try exportDestination(try to.get())
        let requestedType = try type.get().map { identifier -> UTType in
            guard let type = UTType(identifier) else {
                throw RequestError(.badRequest, "unknown content type \"\(identifier)\"")
            }
            return type
        }

        // Names taken, and for each name taken twice the next number to try: a request
        // naming one document thousands of times costs a look per name, not a walk of
        // every name before it for every number.
        var names: [String] = []
        var taken = Set<String>()
        var nextNumber: [String: Int] = [:]
        for path in paths {
            var name = PathName.lastComponent(path)
            if taken.contains(name) {
                let first = name
                let (base, ext) = PathName.splitExtension(name)
                var counter = nextNumber[first] ?? 2
                repeat {
                    name = ext.isEmpty ? "\(base) \(counter)" : "\(base) \(counter).\(ext)"
                    counter += 1
                } while taken.contains(name)
                nextNumber[first] = counter
            }
            taken.insert(name)
            names.append(name)
        }

        var snapshots: [(document: any AutosaveDocument, type: UTType, existing: FileWrapper?)] = []
        for path in paths { snapshots.append(try await store.exportSnapshot(path)) }

        let total = paths.count
        let connection = connection
        var prepared: [PreparedExport] = []
        defer { for export in prepared { export.discard() } }
        for (index, snapshot) in snapshots.enumerated() {
            try Task.checkCancellation()
            let exporter = DocumentExporter(
                destination: destination, contentTypes: requestedType.map { [$0] } ?? [snapshot.type])
            do {
                prepared.append(
                    try await Self.prepare(
                        snapshot.document, existing: snapshot.existing, exporter: exporter, name: names[index],
                        confinement: confinement))
            } catch let error as DocumentError {
                throw RequestError(
                    .ioError,
                    "exporting \(paths[index]) failed: \(error)\(Self.hint(for: error, directory: confinement))")
            } catch let error as DocumentExportError {
                throw RequestError(.badRequest, "exporting \(paths[index]) failed: \(error)")
            }
            connection.send {
                Self.writeProgress(id: id, phase: "writing", completed: index + 1, total: total, into: &$0)
            }
        }
        try Task.checkCancellation()
        var urls: [URL] = []
        for (index, export) in prepared.enumerated() {
            // Nothing at the destination is replaced: not a file there already, not a
            // document of the store, not an earlier document of this export whose name
            // came out the same once its type's extension was added.
            do { try export.commitWithoutReplacing() } catch {
                // All or nothing: the documents put in place before this one are taken back.
                for earlier in prepared[..<index].reversed() { earlier.takeBack() }
                let undone = index > 0 ? "; the documents put in place before it were taken back" : ""
                throw RequestError(
                    .ioError,
                    "putting \(paths[index]) in place failed: \(error)\(Self.hint(for: error, directory: confinement))\(undone)"
                )
            }
            urls += export.urls
            connection.send {
                Self.writeProgress(id: id, phase: "committing", completed: index + 1, total: total, into: &$0)
            }
        }
        prepared = []
        return urls.map(\.path)
    }

    /// `{"event": "export-progress", "id": …, "phase": …, "completed": …, "total": …}`.
    static func writeProgress(
        id: LineBytes?, phase: StaticString, completed: Int, total: Int, into writer: inout JSONWriter
    ) {
        writer.beginObject()
        writer.key("event")
        writer.string("export-progress")
        writer.key("id")
        if let id { id.withBytes { writer.json($0) } } else { writer.null() }
        writer.key("phase")
        writer.string(phase.description)
        writer.key("completed")
        writer.integer(completed)
        writer.key("total")
        writer.integer(total)
        writer.endObject()
    }

    @MainActor
    private static func prepare<D: AutosaveDocument>(
        _ document: D, existing: FileWrapper?, exporter: DocumentExporter, name: String, confinement: String
    ) async throws -> PreparedExport {
        try await exporter.prepareExport(
            documents: [ExportableDocument(value: document, existing: existing, confinement: confinement)],
            filenames: [name])
    }

    /// What an operator does about an export's failure, where the daemon can tell: a
    /// destination the daemon sees read-only (its unit's sandbox, most often).
    private static func hint(for error: any Error, directory: String) -> String {
        guard let error = error as? DocumentError, error.errno == .readOnlyFileSystem else { return "" }
        return "; the daemon sees that file system read-only (\(WritableDirectories.Problem.readOnlyHint(directory)))"
    }

    /// The export directory: a path relative to the store root (no symbolic links), or an
    /// absolute path inside one of `[Control] ExportDirectories=`.
    func exportDestination(_ to: String) throws -> (destination: URL, confinement: String) {
        let configuration = server.configuration
        if to.hasPrefix("/") {
            let resolved = URL(fileURLWithPath: to).standardizedFileURL.resolvingSymlinksInPath().path
            let allowed = configuration.exportDirectories.lazy.map {
                URL(fileURLWithPath: $0).standardizedFileURL.resolvingSymlinksInPath().path
            }.first { base in PathName.isWithin(resolved, base) }
            guard let allowed else {
                throw RequestError(
                    .invalidPath,
                    "export destination '\(to)' is outside the store root; allow it with [Control] ExportDirectories=")
            }
            return (URL(fileURLWithPath: resolved), allowed)
        }
        try server.checkBeneathRoot(to)
        let relative = try DocumentPath.validate(to)
        // A package document's directory holds its members: files put there would be
        // taken for members by its next save, or removed by it.
        var prefix = ""
        for component in relative.split(separator: "/") {
            prefix += prefix.isEmpty ? component : "/" + component
            if store.registry.isPackage(String(component)) {
                throw RequestError(
                    .invalidPath,
                    "export destination '\(to)' lies inside the package document '\(prefix)', whose files are its members"
                )
            }
        }
        let path = store.root + "/" + relative
        guard (try? FileDescriptor.currentWorkingDirectory.status(of: path))?.kind == .directory else {
            throw RequestError(.notFound, "export destination '\(to)' is not a directory under the store root")
        }
        return (URL(fileURLWithPath: path), store.root)
    }
}
