import Control
import Foundation
import Testing

/// The request decoders side by side: the scanner that reads a plain `set` or `append`
/// straight from the bytes (``EditRequest/scanRaw(_:)``, and ``EditRequest/scan(_:)``
/// with strings made from it) may decline any line (the general parser then reads it),
/// but a line it accepts must mean exactly what the general parser makes of it — the
/// same command, document, text and id, and an id echoed as sent that is JSON for the
/// same value — and a line the general parser refuses it must decline.
@Suite("Request decoders agree")
struct DecoderDifferentialTests {
    /// What the general path makes of a line: the plain edit it is, or `nil` for anything
    /// else (not JSON, not an object, a field twice, other fields or types).
    static func general(_ line: [UInt8]) -> (id: JSONValue?, command: String, document: String, text: String)? {
        guard let value = try? JSONValue(parsing: line), case .object(let members) = value else { return nil }
        guard Set(members.map(\.key)).count == members.count else { return nil }
        var id: JSONValue?
        var command: String?
        var document: String?
        var text: String?
        for member in members {
            switch (member.key, member.value) {
            case ("id", .array), ("id", .object): return nil
            case ("id", let value): id = value
            case ("cmd", .string(let name)) where name == "set" || name == "append": command = name
            case ("doc", .string(let path)): document = path
            case ("text", .string(let string)): text = string
            default: return nil
            }
        }
        guard let command, let document, let text else { return nil }
        return (id, command, document, text)
    }

    static func check(_ line: [UInt8], problems: inout [String]) {
        let expected = general(line)
        let shown = String(decoding: line, as: UTF8.self)
        line.withUnsafeBytes { bytes in
            if let scanned = EditRequest.scan(bytes) {
                let command = scanned.command == .set ? "set" : "append"
                if let expected {
                    if expected.command != command || expected.document != scanned.document
                        || expected.text != scanned.text || expected.id != scanned.id
                    {
                        problems.append("scan disagrees on \(shown)")
                    }
                } else {
                    problems.append("scan accepts what the parser refuses: \(shown)")
                }
            }
            if let raw = EditRequest.scanRaw(bytes) {
                let command = raw.command == .set ? "set" : "append"
                let document = raw.documentPath
                if let expected {
                    let echoed = raw.id.map { try? JSONValue(parsing: Array($0)) }
                    if expected.command != command || expected.document != document || expected.text != raw.text
                        || expected.id != raw.idValue || (echoed ?? expected.id) != expected.id
                    {
                        problems.append("scanRaw disagrees on \(shown)")
                    }
                } else {
                    problems.append("scanRaw accepts what the parser refuses: \(shown)")
                }
            }
        }
    }

    @Test("Hand-picked lines: escapes, whitespace, ids of every form, duplicates, trailing bytes, bad UTF-8")
    func handPicked() {
        let lines = [
            #"{"cmd":"set","doc":"a.txt","text":"x"}"#, #"{"id":1,"cmd":"set","doc":"a.txt","text":"x"}"#,
            #" { "id" : 7 , "cmd" : "append" , "doc" : "a.txt" , "text" : "x" } "#,
            #"{"id":-0,"cmd":"set","doc":"a","text":""}"#, #"{"id":01,"cmd":"set","doc":"a","text":""}"#,
            #"{"id":1.0,"cmd":"set","doc":"a","text":""}"#, #"{"id":1e3,"cmd":"set","doc":"a","text":""}"#,
            #"{"id":"s","cmd":"set","doc":"a","text":""}"#, #"{"id":"s\"q","cmd":"set","doc":"a","text":""}"#,
            #"{"id":true,"cmd":"set","doc":"a","text":""}"#, #"{"id":null,"cmd":"set","doc":"a","text":""}"#,
            #"{"id":tru,"cmd":"set","doc":"a","text":""}"#, #"{"id":[1],"cmd":"set","doc":"a","text":""}"#,
            #"{"cmd":"set","doc":"a\u0041","text":"x"}"#, #"{"cmd":"set","doc":"a","text":"\u00e9\n\t\"\\\/"}"#,
            #"{"cmd":"set","doc":"a","text":"\ud83d\ude00"}"#, #"{"cmd":"set","doc":"a","text":"\x"}"#,
            #"{"cmd":"set","doc":"é","text":"ü"}"#, #"{"cmd":"set","cmd":"set","doc":"a","text":"x"}"#,
            #"{"cmd":"set","doc":"a","text":"x"} x"#, #"{"cmd":"set","doc":"a","text":"x"}}"#,
            #"{"cmd":"set","doc":"a","text":"x",}"#, #"{"cmd":"set","doc":"a","text":"x"  "#,
            #"{"cmd":"SET","doc":"a","text":"x"}"#, #"{"cmd":"set","doc":1,"text":"x"}"#,
            #"{"cmd":"set","doc":"a","text":null}"#, #"{"cmd":"set","doc":"a","text":"x","extra":1}"#,
            #"{"cmd":"set","doc":"a","json":{}}"#, #"{"cmd":"append","doc":"a"}"#,
            #"{"c\u006dd":"set","doc":"a","text":"x"}"#,
            "{\"cmd\":\"set\",\"doc\":\"a\",\"text\":\"tab\there\"}",
            "{\"cmd\":\"set\",\"doc\":\"a\u{7F}\",\"text\":\"x\"}",
        ]
        var problems: [String] = []
        for line in lines { Self.check(Array(line.utf8), problems: &problems) }
        for bad: [UInt8] in [[0xFF], [0xC3], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80]] {
            let line = Array(#"{"cmd":"set","doc":"a","text":""#.utf8) + bad + Array(#""}"#.utf8)
            Self.check(line, problems: &problems)
            let doc = Array(#"{"cmd":"set","doc":""#.utf8) + bad + Array(#"","text":"x"}"#.utf8)
            Self.check(doc, problems: &problems)
        }
        #expect(problems.isEmpty, "\(problems)")
    }

    @Test("Long values with one special byte at every position: quotes, backslashes, controls, UTF-8, bad UTF-8")
    func longValues() {
        var problems: [String] = []
        let specials: [[UInt8]] = [
            Array(#"\""#.utf8), Array(#"\\"#.utf8), Array(#"\n"#.utf8), [0x22], [0x5C], [0x01], [0x1F], [0x7F],
            [0xC3, 0xA9], [0xE2, 0x80, 0xA8], [0xF0, 0x9F, 0x98, 0x80], [0xFF], [0xC3], [0x20],
        ]
        for length in [0, 1, 7, 8, 9, 15, 16, 17, 31, 64] {
            for at in 0...length {
                for special in specials {
                    var text = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                    text.insert(contentsOf: special, at: at)
                    let line = Array(#"{"cmd":"set","doc":"a.txt","text":""#.utf8) + text + Array(#""}"#.utf8)
                    Self.check(line, problems: &problems)
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.prefix(5))")
    }

    @Test("200,000 seeded random edit lines, mutated byte by byte: the scanners never disagree with the parser")
    func random() {
        var random = SeededGenerator(state: 42)
        var generator = RequestGenerator(random: SeededGenerator(state: 43))
        let pieces: [[UInt8]] = [
            Array(#"\u0041"#.utf8), Array(#"\""#.utf8), [0x20], [0x09], [0x0A], Array(",".utf8), Array("}".utf8),
            Array(":".utf8), [0xC3, 0xA9], [0xFF], [0x00], Array("\\".utf8), Array("1".utf8), Array("\"id\":".utf8),
        ]
        var problems: [String] = []
        for index in 0..<200_000 {
            var line: [UInt8]
            let id: JSONValue = [.number(String(index)), .string("r\(index)"), .bool(true), .null].randomElement(
                using: &random)!
            var fields: [(key: String, value: JSONValue)] = [
                ("cmd", .string(["set", "append"].randomElement(using: &random)!)),
                ("doc", .string(RequestGenerator.documents.randomElement(using: &random)!)),
                ("text", .string(generator.text())),
            ]
            if Bool.random(using: &random) { fields.insert(("id", id), at: Int.random(in: 0...3, using: &random)) }
            fields.shuffle(using: &random)
            line = Array(JSONValue.object(fields).serialized(pretty: false).utf8)
            for _ in 0..<Int.random(in: 0...2, using: &random) where !line.isEmpty {
                let at = Int.random(in: 0..<line.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: line.remove(at: at)
                case 1: line.insert(contentsOf: pieces.randomElement(using: &random)!, at: at)
                default: line[at] = UInt8.random(in: 0...255, using: &random)
                }
            }
            Self.check(line, problems: &problems)
            if problems.count > 20 { break }
        }
        #expect(problems.isEmpty, "\(problems)")
    }
}
