import Testing

@testable import Documents

@Suite("Temporary names: made, and told from other names")
struct TemporaryNameTests {
    @Test("A name made for a file parses back to the file's name, plain or old, however long or non-ASCII")
    func roundTrip() {
        for name in ["a.txt", "notes", "é.md", "with space.txt", ".hidden", String(repeating: "n", count: 300)] {
            for old in [false, true] {
                let temporary = TemporaryName.make(for: name, old: old)
                #expect(temporary.utf8.count <= 255)
                let parsed = TemporaryName.parse(temporary)
                #expect(parsed?.isOld == old, "\(temporary)")
                if name.utf8.count < 200 {
                    #expect(parsed?.target == name, "\(temporary)")
                } else {
                    #expect(parsed.map { name.hasPrefix($0.target) } == true, "a shortened name's target is a prefix")
                }
            }
        }
    }

    @Test("Names that are not temporaries are told apart")
    func notTemporary() {
        for name in [
            "a.txt", ".a.txt", ".a.txt.autosave-", ".a.txt.autosave-AbC12", ".a.txt.autosave-AbC12!",
            "a.txt.autosave-AbC123x", ".autosave-AbC123", "x.autosave-AbC123", ".a.txt.autosav-AbC123", "",
        ] {
            #expect(TemporaryName.parse(name) == nil, "\(name)")
            #expect(!TemporaryName.isTemporary(name))
        }
        #expect(
            TemporaryName.parse(".a.txt.autosave-AbC123").map { [$0.target, "\($0.isOld)"] } == ["a.txt", "false"])
        #expect(TemporaryName.parse(".a.autosave-old-Zz0099").map { [$0.target, "\($0.isOld)"] } == ["a", "true"])
        // A temporary needs a target of one byte at least.
        #expect(TemporaryName.parse("..autosave-AbC123") == nil)
        #expect(TemporaryName.parse("...autosave-AbC123").map(\.target) == ".")
    }

    @Test("Random names are unlike each other")
    func distinct() {
        let names = (0..<10_000).map { _ in TemporaryName.make(for: "a.txt") }
        #expect(Set(names).count == names.count)
    }
}
