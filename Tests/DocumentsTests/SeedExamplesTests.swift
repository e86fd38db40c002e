// The two Apple documentation pages this project grew from, compiled with only
// `import Documents` added, plus the small types the pages leave to the reader.

import Documents
import Foundation
import TestSupport
import Testing

// MARK: - FileDocument.fileWrapper(configuration:) — the NoteCollection example (verbatim)

struct NoteCollection: FileDocument {
    var metadata: Metadata
    var notes: [Note] = []

    // ...

    func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
        let documentPackage = configuration.existingFile ?? FileWrapper(directoryWithFileWrappers: [:])
        let encoder = JSONEncoder()

        // Update the metadata if it changed.
        if metadata.isChanged {
            if let old = documentPackage.fileWrappers?[Metadata.fileName] {
                documentPackage.removeFileWrapper(old)
            }
            documentPackage.addRegularFile(
                withContents: try encoder.encode(metadata),
                preferredFilename: Metadata.fileName)
        }

        // Sync note wrappers with the notes collection.
        let currentNotes = Set(notes.map(\.filename))
        let notesFiles = documentPackage.fileWrappers ?? [:]

        // Remove notes no longer in the collection.
        for (filename, wrapper) in notesFiles {
            if !currentNotes.contains(filename) && filename != Metadata.fileName {
                documentPackage.removeFileWrapper(wrapper)
            }
        }

        // Write notes that are new or changed.
        for note in notes where note.isChanged {
            if let old = documentPackage.fileWrappers?[note.filename] {
                documentPackage.removeFileWrapper(old)
            }
            documentPackage.addRegularFile(
                withContents: try encoder.encode(note),
                preferredFilename: note.filename)
        }

        return documentPackage
    }
}

// What the page leaves to the reader ("// ..."): the types and the reading side.

struct Metadata: Codable {
    static let fileName = "metadata.json"
    var title: String
    var isChanged = true

    enum CodingKeys: String, CodingKey { case title }
}

struct Note: Codable {
    var filename: String
    var text: String
    var isChanged = true

    enum CodingKeys: String, CodingKey { case filename, text }
}

extension UTType {
    static let noteCollection = UTType.declare(
        "com.example.note-collection", conformingTo: [.package], filenameExtensions: ["notes"])
}

extension NoteCollection {
    static var readableContentTypes: [UTType] { [.noteCollection] }

    init(configuration: ReadConfiguration) throws {
        let decoder = JSONDecoder()
        let files = configuration.file.fileWrappers ?? [:]
        guard let metadataData = files[Metadata.fileName]?.regularFileContents else {
            throw CocoaError(.fileReadCorruptFile)
        }
        var metadata = try decoder.decode(Metadata.self, from: metadataData)
        metadata.isChanged = false
        self.metadata = metadata
        self.notes = try files.filter { $0.key != Metadata.fileName }.sorted { $0.key < $1.key }.map { _, wrapper in
            var note = try decoder.decode(Note.self, from: wrapper.regularFileContents ?? Data())
            note.isChanged = false
            return note
        }
    }

    mutating func markSaved() {
        metadata.isChanged = false
        for index in notes.indices { notes[index].isChanged = false }
    }
}

// MARK: - fileExporter(isPresented:documents:…) — the TextDocument example (verbatim)

@MainActor
final class TextDocument: WritableDocument {
    static let writableContentTypes: [UTType] = [.utf8PlainText]

    var text: String = ""

    nonisolated func writer(
        configuration: sending WriteConfiguration
    ) -> sending FileWrapperDocumentWriter {
        FileWrapperDocumentWriter(configuration) { snapshot, _ in
            FileWrapper(regularFileWithContents: Data(snapshot.utf8))
        }
    }

    func snapshot(contentType: UTType) async throws -> String {
        text
    }
}

// MARK: - Behaviour

@Suite("The seed examples behave as Apple describes")
struct SeedExamplesTests {
    let directory = TemporaryDirectory("seeds")

    func makeCollection() -> NoteCollection {
        NoteCollection(
            metadata: Metadata(title: "Groceries"),
            notes: [
                Note(filename: "a.json", text: "apples"),
                Note(filename: "b.json", text: "bread"),
                Note(filename: "c.json", text: "cheese"),
            ])
    }

    func snapshotOfFiles(in package: String) throws -> [String: (inode: UInt64, bytes: Data)] {
        var result: [String: (UInt64, Data)] = [:]
        for name in try Disk.names(in: package) {
            result[name] = (try Disk.inode(package + "/" + name), try Disk.bytes(package + "/" + name))
        }
        return result
    }

    @Test(
        "Saving the NoteCollection again after changing one note rewrites exactly that note's file",
        arguments: [FileWrapper.WritingOptions(), .atomic])
    func noteCollectionRewritesOnlyTheChangedNote(options: FileWrapper.WritingOptions) throws {
        let url = directory.url.appendingPathComponent("groceries.notes")
        var collection = makeCollection()
        let first = try DocumentFile.save(
            collection, to: url, contentType: .noteCollection, existingFile: nil, options: options)
        collection.markSaved()
        #expect(first.report.filesWritten == 4)
        let before = try snapshotOfFiles(in: url.path)
        #expect(Set(before.keys) == ["metadata.json", "a.json", "b.json", "c.json"])

        collection.notes[1].text = "brioche"
        collection.notes[1].isChanged = true
        let second = try DocumentFile.save(
            collection, to: url, contentType: .noteCollection, existingFile: first.file, options: options)

        #expect(second.report.filesWritten == 1)
        #expect(second.report.bytesWritten == (try JSONEncoder().encode(collection.notes[1])).count)
        let after = try snapshotOfFiles(in: url.path)
        #expect(Set(after.keys) == Set(before.keys))
        for name in ["metadata.json", "a.json", "c.json"] {
            #expect(after[name]?.inode == before[name]?.inode, "\(name) kept its inode")
            #expect(after[name]?.bytes == before[name]?.bytes, "\(name) kept its bytes")
        }
        #expect(after["b.json"]?.inode != before["b.json"]?.inode)
        // The bytes on disk are the wrapper's bytes. (Two encodes of one value may order
        // the keys differently — a dictionary's order differs per instance — so the
        // content is checked by decoding, not against a second encode.)
        let written = try #require(second.file.fileWrappers?["b.json"]?.regularFileContents)
        #expect(after["b.json"]?.bytes == written)
        let note = try JSONDecoder().decode(Note.self, from: try #require(after["b.json"]?.bytes))
        #expect(note.filename == "b.json" && note.text == "brioche")
        #expect(Disk.temporaries(under: directory.path).isEmpty)

        // And it reads back as what was saved.
        let (reread, _) = try DocumentFile.read(NoteCollection.self, from: url)
        #expect(reread.notes.map(\.text) == ["apples", "brioche", "cheese"])
        #expect(reread.metadata.title == "Groceries")
    }

    @Test("A note removed from the collection is removed from the package")
    func removedNoteIsUnlinked() throws {
        let url = directory.url.appendingPathComponent("groceries.notes")
        var collection = makeCollection()
        let first = try DocumentFile.save(collection, to: url, contentType: .noteCollection, existingFile: nil)
        collection.markSaved()
        collection.notes.remove(at: 0)
        let second = try DocumentFile.save(collection, to: url, contentType: .noteCollection, existingFile: first.file)
        #expect(second.report.entriesRemoved == 1)
        #expect(second.report.filesWritten == 0)
        #expect(try Disk.names(in: url.path) == ["b.json", "c.json", "metadata.json"])
    }

    @Test("A package read lazily from disk is saved without loading or rewriting its unchanged notes")
    func readThenSaveTouchesOnlyTheChange() throws {
        let url = directory.url.appendingPathComponent("groceries.notes")
        var collection = makeCollection()
        try DocumentFile.save(collection, to: url, contentType: .noteCollection, existingFile: nil)
        let before = try snapshotOfFiles(in: url.path)

        let existing = try FileWrapper(url: url)
        collection.markSaved()
        collection.notes[2].text = "cherries"
        collection.notes[2].isChanged = true
        let saved = try DocumentFile.save(collection, to: url, contentType: .noteCollection, existingFile: existing)
        #expect(saved.report.filesWritten == 1)
        #expect(existing.fileWrappers?["a.json"]?.isContentsLoaded == false)
        let after = try snapshotOfFiles(in: url.path)
        #expect(after["a.json"]?.inode == before["a.json"]?.inode)
        #expect(after["c.json"]?.inode != before["c.json"]?.inode)
    }

    @Test("The TextDocument exports through DocumentExporter")
    @MainActor
    func textDocumentExports() async throws {
        let first = TextDocument()
        first.text = "first document\n"
        let second = TextDocument()
        second.text = "second document\n"
        let exporter = DocumentExporter(destination: directory.url)
        let urls = try await exporter.export(documents: [first, second], filenames: ["one", "two"])
        #expect(urls.map(\.lastPathComponent) == ["one.txt", "two.txt"])
        #expect(try Disk.bytes(urls[0].path) == Data("first document\n".utf8))
        #expect(try Disk.bytes(urls[1].path) == Data("second document\n".utf8))
    }
}

/// A reference-type document: its state is captured in a snapshot, then serialised.
final class Whiteboard: ReferenceFileDocument {
    static var readableContentTypes: [UTType] { [.json] }
    var strokes: [String]

    init(strokes: [String]) { self.strokes = strokes }

    init(configuration: ReadConfiguration) throws {
        strokes = try JSONDecoder().decode([String].self, from: configuration.file.regularFileContents ?? Data())
    }

    func snapshot(contentType: UTType) throws -> [String] { strokes }

    func fileWrapper(snapshot: [String], configuration: WriteConfiguration) throws -> FileWrapper {
        FileWrapper(regularFileWithContents: try JSONEncoder().encode(snapshot))
    }
}

@Suite("ReferenceFileDocument")
struct ReferenceFileDocumentTests {
    let directory = TemporaryDirectory("reference")

    @Test("A snapshot taken before further changes is what gets written; the file reads back")
    func snapshotThenWrite() throws {
        let board = Whiteboard(strokes: ["line"])
        let snapshot = try board.snapshot(contentType: .json)
        board.strokes.append("circle")  // after the snapshot: not in this save
        let wrapper = try board.fileWrapper(
            snapshot: snapshot, configuration: .init(contentType: .json, existingFile: nil))
        let url = directory.url.appendingPathComponent("board.json")
        try DurableWriter().write(wrapper, to: url.path)
        let reread = try Whiteboard(configuration: .init(contentType: .json, file: try FileWrapper(url: url)))
        #expect(reread.strokes == ["line"])
        #expect(Whiteboard.writableContentTypes == [.json])
    }
}
