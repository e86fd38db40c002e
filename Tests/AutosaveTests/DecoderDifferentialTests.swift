import Control
import Foundation
import Testing

/// The request decoder against the reference: ``RequestDecoder`` reads a line straight
/// from its bytes; ``ControlRequest/reference(_:)-([UInt8])`` parses it with the general
/// JSON parser and reads the value field by field. For every line — every command,
/// random and hostile ones — both must give the same request (the same id text to echo,
/// the same fields or the same field errors) or the same refusal, and a line the parser
/// refuses the decoder must find not JSON on its own.
@Suite("Request decoders agree")
struct DecoderDifferentialTests {
    /// Whether the decoder and the reference agree on `line`; a description of the difference otherwise.
    static func disagreement(_ line: [UInt8]) -> String? {
        let reference = ControlRequest.reference(line)
        let shown = String(reflecting: String(decoding: line, as: UTF8.self))
        // The decoder's requests hold slices of the line: looked at while it is borrowed.
        return line.withUnsafeBytes { bytes -> String? in
            let scanned = RequestDecoder.scan(bytes)
            if case .refused(nil, let message) = reference, message.hasPrefix("the request is not JSON: ") {
                guard scanned == .notJSON else { return "the parser refuses \(shown), the decoder reads \(scanned)" }
            } else {
                guard case .decoded(let decoded) = scanned else {
                    return "the decoder refuses \(shown), the parser reads \(reference)"
                }
                // Exactly: strings scalar for scalar (== on strings is canonical equivalence),
                // JSON values member by member and numbers by their text (their == is looser).
                if decoded != reference || !exact(decoded, reference, line: bytes) {
                    return "on \(shown): decoder \(decoded), reference \(reference)"
                }
                if case .request(let request) = decoded {
                    switch request.command {
                    case .set(.success(let document), _), .append(.success(let document), _):
                        // The path's UTF-8: a slice of the line, or decoded.
                        if !document.bytes.array.elementsEqual(document.path.utf8) {
                            return "on \(shown): the document's bytes are not its path"
                        }
                        let inLine = document.bytes.withBytes { slice in
                            slice.baseAddress.map { $0 >= bytes.baseAddress! && $0 < bytes.baseAddress! + bytes.count }
                                ?? true
                        }
                        if document.bytes.isSlice, !inLine {
                            return "on \(shown): the document's slice is not in the line"
                        }
                    default: break
                    }
                }
            }
            let decoded = RequestDecoder.decode(bytes)
            if decoded != reference || !exact(decoded.owned(), reference, line: bytes) {
                return "decode(_:) differs from the reference on \(shown)"
            }
            return nil
        }
    }

    /// Whether `a` and `b` are the same scalar for scalar (compared by their descriptions,
    /// which is slow: only for lines where `==` may not be enough — strings that are not
    /// ASCII, raw or by an escape, and `json` values).
    static func exact(_ a: DecodedLine, _ b: DecodedLine, line: UnsafeRawBufferPointer) -> Bool {
        let strict =
            line.contains { $0 >= 0x80 || $0 == UInt8(ascii: "\\") } || line.firstRange(of: "json".utf8) != nil
        return !strict || String(reflecting: a).utf8.elementsEqual(String(reflecting: b).utf8)
    }

    static func check(_ lines: [String], problems: inout [String]) {
        for line in lines { check(Array(line.utf8), problems: &problems) }
    }

    static func check(_ line: [UInt8], problems: inout [String]) {
        if let problem = disagreement(line) { problems.append(problem) }
    }

    @Test("Every command with its fields right, wrong, missing, null and of every type")
    func everyCommand() {
        let values = [
            #""a.txt""#, #""""#, "1", "-0", "1.5", "1e3", "1E+2", "99999999999999999999", "9223372036854775807",
            "9223372036854775808", "-9223372036854775809", "1e400", "true", "false", "null", "[]", "[\"a\",\"b\"]",
            "[\"a\",1]", "{}", #"{"a":[1,{"b":null}]}"#, #""aGVsbG8=""#, #""!!""#, #""/a/0""#, #""saved""#,
            #""\u00e9\n""#, #""é""#,
        ]
        let keys = [
            "doc", "text", "json", "base64", "offset", "length", "patch", "member", "members", "pointer", "wait",
            "durable", "target", "docs", "events", "to", "type", "id", "extra",
        ]
        var problems: [String] = []
        for command in ControlProtocol.commands + ["bogus", ""] {
            Self.check(
                [#"{"cmd":"\#(command)"}"#, #"{"id":1,"cmd":"\#(command)","doc":"a.txt"}"#], problems: &problems)
            for key in keys {
                for value in values {
                    Self.check(
                        [
                            #"{"cmd":"\#(command)","\#(key)":\#(value)}"#,
                            #"{"id":"x","doc":"a.json","\#(key)":\#(value),"cmd":"\#(command)","text":"t"}"#,
                        ], problems: &problems)
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.prefix(10))")
    }

    @Test("Hand-picked lines: escapes, whitespace, ids of every form, duplicates, trailing bytes, nesting")
    func handPicked() {
        var lines = [
            #"{"cmd":"set","doc":"a.txt","text":"x"}"#, #"{"id":1,"cmd":"set","doc":"a.txt","text":"x"}"#,
            #" { "id" : 7 , "cmd" : "append" , "doc" : "a.txt" , "text" : "x" } "#,
            "\t{\r\n\"cmd\"\t:\n\"set\"\r,\"doc\":\"a\" ,\"text\":\"\"\n}\t",
            #"{"id":-0,"cmd":"set","doc":"a","text":""}"#, #"{"id":01,"cmd":"set","doc":"a","text":""}"#,
            #"{"id":1.0,"cmd":"set","doc":"a","text":""}"#, #"{"id":1e3,"cmd":"set","doc":"a","text":""}"#,
            #"{"id":"s","cmd":"set","doc":"a","text":""}"#, #"{"id":"s\"q","cmd":"set","doc":"a","text":""}"#,
            #"{"id":"\/\u0041","cmd":"set","doc":"a","text":""}"#, #"{"id":"é","cmd":"status"}"#,
            #"{"id":true,"cmd":"set","doc":"a","text":""}"#, #"{"id":null,"cmd":"set","doc":"a","text":""}"#,
            #"{"id":tru,"cmd":"set","doc":"a","text":""}"#, #"{"id":[1, {"a" : "\u0041"}],"cmd":"list"}"#,
            #"{"id":{ },"cmd":"list"}"#, #"{"id":[ ],"cmd":"teleport"}"#,
            #"{"cmd":"set","doc":"a\u0041","text":"x"}"#, #"{"cmd":"set","doc":"a","text":"\u00e9\n\t\"\\\/"}"#,
            #"{"cmd":"set","doc":"a","text":"\ud83d\ude00"}"#, #"{"cmd":"set","doc":"a","text":"\ud83d"}"#,
            #"{"cmd":"set","doc":"a","text":"\ude00"}"#, #"{"cmd":"set","doc":"a","text":"\ud83d\u0041"}"#,
            #"{"cmd":"set","doc":"a","text":"\ud83dx"}"#, #"{"cmd":"set","doc":"a","text":"\u0000"}"#,
            #"{"cmd":"set","doc":"a\u0000b","text":"x"}"#, #"{"cmd":"set","doc":"a","text":"\u+041"}"#,
            #"{"cmd":"set","doc":"a","text":"\u-000"}"#, #"{"cmd":"set","doc":"a","text":"\u00G0"}"#,
            #"{"cmd":"set","doc":"a","text":"\u00"}"#, #"{"cmd":"set","doc":"a","text":"\x"}"#,
            #"{"cmd":"set","doc":"é","text":"ü"}"#, #"{"cmd":"set","cmd":"set","doc":"a","text":"x"}"#,
            #"{"cmd":"set","doc":"a","text":"x"} x"#, #"{"cmd":"set","doc":"a","text":"x"}}"#,
            #"{"cmd":"set","doc":"a","text":"x",}"#, #"{"cmd":"set","doc":"a","text":"x"  "#,
            #"{"cmd":"SET","doc":"a","text":"x"}"#, #"{"cmd":"set","doc":1,"text":"x"}"#,
            #"{"cmd":"set","doc":"a","text":null}"#, #"{"cmd":"set","doc":"a","text":"x","extra":1}"#,
            #"{"cmd":"set","doc":"a","json":{}}"#, #"{"cmd":"set","doc":"a","json":null}"#,
            #"{"cmd":"set","doc":"a","json":[1,2.50,"\u0041",{"k":-0}]}"#, #"{"cmd":"append","doc":"a"}"#,
            #"{"c\u006dd":"s\u0065t","doc":"a","t\u0065xt":"x"}"#,
            #"{"cmd":"set","doc":"a","te\u0078t":"x","text":"y"}"#,
            #"{"x":1,"x":2,"cmd":"list","cmd":"status"}"#, #"{"id":1,"id":2,"cmd":"list"}"#,
            #"{"id":1,"x":2,"x":3,"cmd":"list"}"#, #"{"\u00e9":1,"e\u0301":2,"cmd":"list"}"#,
            #"{"é":1,"é":2,"cmd":"list"}"#, #"{"K":1,"\u212a":2,"cmd":"status"}"#, #"{"":1,"":2,"cmd":"list"}"#,
            #"{"cmd":"list","x":1,"x":[}"#, #"{"cmd":"status","x":[1,2,]}"#, #"{"cmd":"status","x":{"a":1,}}"#,
            #"{"cmd":"status","x":{"a" 1}}"#, #"{"cmd":"status","x":{1:1}}"#, #"{"cmd":"status","x":-}"#,
            #"{"cmd":"status","x":1.}"#, #"{"cmd":"status","x":1e}"#, #"{"cmd":"status","x":.5}"#,
            #"{"cmd":"status","x":+1}"#, #"{"cmd":"status","x":0x1}"#, #"{"cmd":"status","x":nul}"#,
            #"{"cmd":"status","x":truefalse}"#, #"{"cmd":"status","x":NaN}"#, #"{"cmd":"status","x":"\"}"#,
            #"{"cmd":"status",}"#, #"{,"cmd":"status"}"#, #"{"cmd" "status"}"#, #"{"cmd":"status""#, "{", "}",
            "", " ", "[1,2]", "[1,2", #""a""#, "1", "null", "{}", "{} {}", #"{"cmd":5}"#, #"{"cmd":null}"#,
            #"{"id":3}"#, #"{"id":3,"cmd":["list"]}"#,
            #"{"cmd":"replace","doc":"a","offset":1e2,"length":-0.0,"text":""}"#,
            #"{"cmd":"replace","doc":"a","offset":123456789012345678,"length":1234567890123456789,"text":""}"#,
            #"{"cmd":"replace","doc":"a","offset":-9223372036854775808,"length":9223372036854775807.0,"text":""}"#,
            #"{"cmd":"replace","doc":"a","offset":1e-400,"length":1E400,"text":""}"#,
            #"{"cmd":"patch","doc":"a.json","patch":"{\"a\":1}"}"#,
            #"{"cmd":"patch","doc":"a.json","patch":{"a" : [ 1 , null ] , "b":{}}}"#,
            #"{"cmd":"cancel","target":{"a":[1, "x"]}}"#, #"{"cmd":"cancel","target":"\u0041"}"#,
            #"{"cmd":"cancel","target":null}"#, #"{"cmd":"subscribe","docs":["a","b\u0000"],"events":["saved"]}"#,
            #"{"cmd":"subscribe","docs":[],"events":[null]}"#, #"{"cmd":"export","docs":[],"to":"x"}"#,
            #"{"cmd":"export","docs":["a", ["b"]],"to":"x","type":null}"#,
            #"{"cmd":"get","doc":"a","pointer":null,"member":null,"members":null}"#,
            #"{"cmd":"get","doc":"a","pointer":5,"member":"m"}"#, #"{"cmd":"get","doc":"a","member":"m","members":1}"#,
            #"{"cmd":"put-member","doc":"a","member":"m","base64":"AA=="}"#,
            #"{"cmd":"put-member","doc":"a","member":"m","text":null,"base64":"A"}"#,
            #"{"cmd":"set","doc":"a","durable":true,"text":"x"}"#,
            #"{"cmd":"set","doc":"a","durable":"yes","text":"x"}"#,
            "{\"cmd\":\"set\",\"doc\":\"a\",\"text\":\"tab\there\"}",
            "{\"cmd\":\"set\",\"doc\":\"a\u{7F}\",\"text\":\"x\"}", "{\"cmd\":\"list\"}\u{0}",
            "\u{0}{\"cmd\":\"list\"}", "{\"cmd\":\"list\"\u{0}}", "{\"cmd\":\"li\u{0}st\"}",
        ]
        // Nesting at, and one past, the general parser's limit.
        for depth in [510, 511, 512, 513] {
            let nested = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
            lines.append(#"{"cmd":"status","x":\#(nested)}"#)
            lines.append(#"{"cmd":"cancel","target":\#(nested)}"#)
            lines.append(#"{"cmd":"subscribe","docs":[\#(nested)]}"#)
            lines.append(nested)
        }
        var problems: [String] = []
        Self.check(lines, problems: &problems)
        for bad: [UInt8] in [
            [0xFF], [0xC3], [0xC3, 0x28], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xC0, 0xAF], [0x80],
        ] {
            for template in [
                (#"{"cmd":"set","doc":"a","text":""#, #""}"#), (#"{"cmd":"set","doc":""#, #"","text":"x"}"#),
                (#"{"id":""#, #"","cmd":"list"}"#), (#"{""#, #"":1,"cmd":"list"}"#), (#"{"cmd":""#, #""}"#),
                (#"{"cmd":"list","x":[""#, #""]}"#), (#"{"cmd":"list"}"#, ""),
                (#"{"cmd":"set","doc":"a","text":"\n"#, #""}"#),
            ] {
                Self.check(Array(template.0.utf8) + bad + Array(template.1.utf8), problems: &problems)
            }
        }
        #expect(problems.isEmpty, "\(problems.prefix(10))")
    }

    @Test("A \\u escape takes four hex digits, no sign: the general parser refused neither \\u+041 nor \\u-000")
    func unicodeEscapeDigits() throws {
        for text in [#""\u+041""#, #""\u-000""#, #""\u+fff""#, #""\u 041""#, #""\u004""#] {
            #expect(throws: JSONSyntaxError.self, "\(text)") { try JSONValue(parsing: text) }
        }
        #expect(try JSONValue(parsing: #""\u0041\u00e9\uD83D\uDE00""#) == .string("Aé😀"))
    }

    @Test("Long values with one special byte at every position: quotes, backslashes, controls, UTF-8, bad UTF-8")
    func longValues() {
        var problems: [String] = []
        let specials: [[UInt8]] = [
            Array(#"\""#.utf8), Array(#"\\"#.utf8), Array(#"\n"#.utf8), Array(#"\u0000"#.utf8), Array(#"\ud800"#.utf8),
            [0x22], [0x5C], [0x00], [0x01], [0x1F], [0x7F], [0xC3, 0xA9], [0xE2, 0x80, 0xA8], [0xF0, 0x9F, 0x98, 0x80],
            [0xFF], [0xC3], [0x20],
        ]
        for length in [0, 1, 7, 8, 9, 15, 16, 17, 31, 64] {
            for at in 0...length {
                for special in specials {
                    var text = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                    text.insert(contentsOf: special, at: at)
                    Self.check(
                        Array(#"{"cmd":"set","doc":"a.txt","text":""#.utf8) + text + Array(#""}"#.utf8),
                        problems: &problems)
                    Self.check(
                        Array(#"{"id":""#.utf8) + text + Array(#"","cmd":"append","doc":""#.utf8) + text
                            + Array(#"","text":"x"}"#.utf8), problems: &problems)
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.prefix(5))")
    }

    @Test("50,000 seeded random requests of every command, mutated byte by byte: the decoder never disagrees")
    func random() {
        var random = SeededGenerator(state: 42)
        var generator = RequestGenerator(random: SeededGenerator(state: 43))
        let pieces: [[UInt8]] = [
            Array(#"\u0041"#.utf8), Array(#"\ud83d"#.utf8), Array(#"\ude00"#.utf8), Array(#"\u0000"#.utf8),
            Array(#"\""#.utf8), [0x20], [0x09], [0x0A], [0x0D], Array(",".utf8), Array("}".utf8), Array("{".utf8),
            Array("[".utf8), Array("]".utf8), Array(":".utf8), [0xC3, 0xA9], [0xFF], [0x00], Array("\\".utf8),
            Array("1".utf8), Array("-".utf8), Array("e".utf8), Array(".".utf8), Array("\"id\":".utf8),
            Array("\"doc\":\"x\",".utf8), Array("\"cmd\":\"set\",".utf8), Array("null".utf8), Array("true".utf8),
            Array("99999999999999999999".utf8),
        ]
        var problems: [String] = []
        for index in 0..<50_000 {
            var line: [UInt8]
            if index % 3 == 0 {
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
            } else {
                line = Array(generator.request(id: index).utf8)
            }
            for _ in 0..<Int.random(in: 0...3, using: &random) where !line.isEmpty {
                let at = Int.random(in: 0..<line.count, using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0: line.remove(at: at)
                case 1: line.insert(contentsOf: pieces.randomElement(using: &random)!, at: at)
                case 2: line[at] = UInt8.random(in: 0...255, using: &random)
                default:
                    // A member repeated: its text copied after itself.
                    let end = min(line.count, at + Int.random(in: 1...12, using: &random))
                    line.insert(contentsOf: line[at..<end], at: end)
                }
            }
            Self.check(line, problems: &problems)
            if problems.count > 20 { break }
        }
        #expect(problems.isEmpty, "\(problems)")
    }
}
