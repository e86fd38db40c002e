import Documents
import Testing

@testable import Autosave

/// The store's table of open documents: each entry in a slot of its own, changed in place.
@Suite("The store's table of documents")
struct EntryTableTests {
    typealias Entry = DocumentStore.Entry

    static func entry(_ text: String) -> Entry {
        Entry(contentType: .plainText, isPackage: false, document: PlainTextDocument(text: text), existingFile: nil)
    }

    static func text(_ entry: Entry?) -> String? { (entry?.document as? PlainTextDocument)?.text }

    @Test("Insert, look up, change in place by path and by index, replace, remove")
    func basics() throws {
        var table = DocumentStore.EntryTable()
        #expect(table.isEmpty)
        #expect(table.updateValue(Self.entry("a"), forKey: "a.txt") == nil)
        table["b.txt"] = Self.entry("b")
        #expect(table.count == 2)
        #expect(Self.text(table["a.txt"]) == "a")
        #expect(table["c.txt"] == nil)

        table["a.txt"]!.changeCount = 5
        #expect(table["a.txt"]?.changeCount == 5)
        let index = try #require(table.index(forKey: "b.txt"))
        table[index].changeCount = 7
        #expect(table["b.txt"]?.changeCount == 7, "a change through the index is the entry's own")
        #expect(table[index].changeCount == 7)

        // A copy taken out is a value: changing the table later leaves it as it was.
        let copy = table["a.txt"]!
        table["a.txt"]!.changeCount = 6
        #expect(copy.changeCount == 5)

        let replaced = table.updateValue(Self.entry("a2"), forKey: "a.txt")
        #expect(Self.text(replaced) == "a" && replaced?.changeCount == 6)
        #expect(Self.text(table["a.txt"]) == "a2")
        #expect(table.count == 2)

        table["b.txt"] = nil
        #expect(table["b.txt"] == nil && table.index(forKey: "b.txt") == nil)
        #expect(Self.text(table.removeValue(forKey: "a.txt")) == "a2")
        #expect(table.removeValue(forKey: "a.txt") == nil)
        #expect(table.isEmpty)
    }

    @Test("Setting nil through a change in place removes the entry; a change of a missing path adds none")
    func modifyAccessor() {
        var table = DocumentStore.EntryTable()
        table["a.txt"] = Self.entry("a")
        func clear(_ entry: inout Entry?) { entry = nil }
        clear(&table["a.txt"])
        #expect(table.isEmpty)
        func touch(_ entry: inout Entry?) { entry?.changeCount += 1 }
        touch(&table["missing.txt"])
        #expect(table.isEmpty)
        func add(_ entry: inout Entry?) { entry = Self.entry("new") }
        add(&table["new.txt"])
        #expect(Self.text(table["new.txt"]) == "new")
    }

    @Test("Every entry once, with its path: iteration, keys and values agree")
    func iteration() {
        var table = DocumentStore.EntryTable()
        for i in 0..<1000 {
            table["d\(i).txt"] = Self.entry("\(i)")
        }
        var seen: [String: String] = [:]
        for (path, entry) in table { seen[path] = Self.text(entry) ?? "" }
        #expect(seen.count == 1000)
        #expect(seen.allSatisfy { $0.key == "d\($0.value).txt" })
        #expect(Set(table.keys) == Set(seen.keys))
        #expect(Set(table.values.map { Self.text($0) ?? "" }) == Set(seen.values))
        #expect(table.filter { $0.value.changeCount == 0 }.count == 1000)
    }
}
