import Documents
import Foundation
import TestSupport
import Testing

/// A document that can be written as JSON or plain text, preferring JSON.
@MainActor
final class RecordDocument: WritableDocument {
    static let writableContentTypes: [UTType] = [.json, .utf8PlainText]
    var value: String

    init(_ value: String) { self.value = value }

    nonisolated func writer(configuration: sending WriteConfiguration) -> sending FileWrapperDocumentWriter {
        let type = configuration.contentType
        return FileWrapperDocumentWriter(configuration) { snapshot, _ in
            let text = type == .json ? "{\"value\":\"\(snapshot)\"}" : snapshot
            return FileWrapper(regularFileWithContents: Data(text.utf8))
        }
    }

    func snapshot(contentType: UTType) async throws -> String { value }
}

/// A document whose snapshot waits until the test opens its gate, so a test can cancel
/// an export at a known point.
@MainActor
final class GatedDocument: WritableDocument {
    static let writableContentTypes: [UTType] = [.utf8PlainText]
    let text: String
    let gate: AsyncStream<Void>?
    let entered: AsyncStream<Void>.Continuation?

    init(_ text: String, gate: AsyncStream<Void>? = nil, entered: AsyncStream<Void>.Continuation? = nil) {
        self.text = text
        self.gate = gate
        self.entered = entered
    }

    nonisolated func writer(configuration: sending WriteConfiguration) -> sending FileWrapperDocumentWriter {
        FileWrapperDocumentWriter(configuration) { snapshot, _ in
            FileWrapper(regularFileWithContents: Data(snapshot.utf8))
        }
    }

    func snapshot(contentType: UTType) async throws -> String {
        entered?.yield()
        if let gate { for await _ in gate { break } }
        return text
    }
}

/// A package-writing document.
@MainActor
final class FolderDocument: WritableDocument {
    static let writableContentTypes: [UTType] = [.folder]
    nonisolated func writer(configuration: sending WriteConfiguration) -> sending FileWrapperDocumentWriter {
        FileWrapperDocumentWriter(configuration) { (snapshot: [String: String], _) in
            FileWrapper(
                directoryWithFileWrappers: snapshot.mapValues { FileWrapper(regularFileWithContents: Data($0.utf8)) })
        }
    }
    func snapshot(contentType: UTType) async throws -> [String: String] { ["a.txt": "A", "b.txt": "B"] }
}

@Suite("DocumentExporter has fileExporter's semantics")
@MainActor
struct ExporterTests {
    let directory = TemporaryDirectory("export")

    @Test("One URL per document, in order; repeated names are made unique")
    func order() async throws {
        let documents = (1...3).map { RecordDocument("r\($0)") }
        let urls = try await DocumentExporter(destination: directory.url).export(documents: documents)
        #expect(urls.map(\.lastPathComponent) == ["Untitled.json", "Untitled 2.json", "Untitled 3.json"])
        for (index, url) in urls.enumerated() {
            #expect(try Disk.bytes(url.path) == Data("{\"value\":\"r\(index + 1)\"}".utf8))
        }
    }

    @Test(
        "All or nothing at commit: when a later document cannot be put in place, those put before it are taken back, the rest discarded; a name another program took meanwhile is not removed"
    )
    func commitFailureTakesBack() async throws {
        let documents = (1...3).map { RecordDocument("r\($0)") }
        let names = ["one", "two", "three"]
        let exporter = DocumentExporter(destination: directory.url)
        let prepared = try await exporter.prepareExport(documents: documents, filenames: names)
        // The third's temporary is gone before the commit (its rename fails, ENOENT).
        let third = try #require(Disk.temporaries(under: directory.path).first { $0.contains(".three.json.") })
        #expect(unlink(directory.path + "/" + third) == 0)
        #expect(throws: DocumentError.self) { try prepared.commitWithoutReplacing() }
        let left = try Disk.names(in: directory.path)
        #expect(left.isEmpty, "nothing of the export is left, placed or temporary: \(left)")

        // Taken back only while still what was put there.
        let again = try await exporter.prepareExport(documents: documents, filenames: names)
        try again.commitWithoutReplacing()
        #expect(try Disk.names(in: directory.path) == ["one.json", "three.json", "two.json"])
        #expect(unlink(directory.path + "/two.json") == 0)
        try Disk.write("theirs", to: directory.path + "/two.json")
        again.takeBack()
        #expect(try Disk.names(in: directory.path) == ["two.json"], "another program's file at a taken-back name stays")
        #expect(try Disk.bytes(directory.path + "/two.json") == Data("theirs".utf8))
    }

    @Test("A requested type the document can write is used")
    func requestedType() async throws {
        let exporter = DocumentExporter(destination: directory.url, contentTypes: [.utf8PlainText])
        let urls = try await exporter.export(documents: [RecordDocument("plain")], filenames: ["note"])
        #expect(urls.map(\.lastPathComponent) == ["note.txt"])
        #expect(try Disk.bytes(urls[0].path) == Data("plain".utf8))
    }

    @Test("A type the document cannot write is replaced by its first writable type")
    func unwritableTypeReplaced() async throws {
        let exporter = DocumentExporter(destination: directory.url, contentTypes: [.png])
        let urls = try await exporter.export(documents: [RecordDocument("x")], filenames: ["picture.png"])
        #expect(urls.map(\.lastPathComponent) == ["picture.png.json"])
        #expect(try Disk.bytes(urls[0].path) == Data("{\"value\":\"x\"}".utf8))
    }

    @Test("An empty collection is an error given to the completion handler")
    func emptyCollection() async throws {
        var result: Result<[URL], any Error>?
        var cancelled = false
        await DocumentExporter(destination: directory.url).export(
            documents: [RecordDocument](), onCompletion: { result = $0 }, onCancellation: { cancelled = true })
        #expect(!cancelled)
        guard case .failure(let error) = result else {
            Issue.record("expected a failure, got \(String(describing: result))")
            return
        }
        #expect(error as? DocumentExportError == .noDocuments)
        #expect(try Disk.names(in: directory.path).isEmpty)
    }

    @Test("A destination that is not a directory, and bad file names, are errors that say so")
    func badDestination() async throws {
        let file = directory.sub("file")
        try Disk.write("x", to: file)
        await #expect(throws: DocumentExportError.destinationNotADirectory(file)) {
            try await DocumentExporter(destination: URL(fileURLWithPath: file)).export(documents: [RecordDocument("x")])
        }
        for name in ["", "..", "a/b", "nul\u{0}"] {
            await #expect(throws: DocumentExportError.invalidFilename(name)) {
                try await DocumentExporter(destination: directory.url).export(
                    documents: [RecordDocument("x")], filenames: [name])
            }
        }
        #expect(try Disk.names(in: directory.path) == ["file"])
    }

    @Test("Progress is reported for every document written and put in place")
    func progress() async throws {
        var seen: [DocumentExporter.Progress] = []
        let urls = try await DocumentExporter(destination: directory.url).export(
            documents: [RecordDocument("a"), RecordDocument("b")], progress: { seen.append($0) })
        #expect(seen.map(\.phase) == [.writing, .writing, .committing, .committing, .finished])
        #expect(seen.map(\.completed) == [1, 2, 1, 2, 2])
        #expect(seen.map { ($0.fractionCompleted * 100).rounded() } == [45, 90, 95, 100, 100])
        #expect(seen[2].url == urls[0])
    }

    @Test("Cancelling calls the cancellation handler, not completion, and leaves no file at all")
    func cancellation() async throws {
        let (gate, open) = AsyncStream<Void>.makeStream()
        let (entered, enteredContinuation) = AsyncStream<Void>.makeStream()
        let existing = directory.sub("Untitled 2.txt")
        try Disk.write("already here", to: existing)
        let documents = [
            GatedDocument("first"),
            GatedDocument("second", gate: gate, entered: enteredContinuation),
        ]
        var completed = false
        var cancelled = false
        let destination = directory.url
        let task = Task { @MainActor in
            await DocumentExporter(destination: destination).export(
                documents: documents, onCompletion: { _ in completed = true }, onCancellation: { cancelled = true })
        }
        // Wait until the second snapshot is being taken: the first document is then
        // fully written under its temporary name.
        for await _ in entered { break }
        #expect(Disk.temporaries(under: directory.path).count == 1)
        task.cancel()
        open.yield()
        open.finish()
        await task.value

        #expect(cancelled)
        #expect(!completed)
        #expect(Disk.temporaries(under: directory.path).isEmpty)
        #expect(try Disk.names(in: directory.path) == ["Untitled 2.txt"])
        #expect(try Disk.bytes(existing) == Data("already here".utf8), "an existing file is not replaced")
    }

    @Test("A package document exports as a directory")
    func package() async throws {
        let urls = try await DocumentExporter(destination: directory.url).export(
            documents: [FolderDocument()], filenames: ["folder"])
        #expect(try Disk.names(in: urls[0].path) == ["a.txt", "b.txt"])
        #expect(Disk.temporaries(under: directory.path).isEmpty)
    }
}
