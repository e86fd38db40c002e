import Control
import Documents
import Foundation
import Posix
import Testing

@testable import Autosave

/// The socket's fast path for the most frequent requests must answer exactly as the
/// general path does: ``EditRequest`` reads what the full JSON parser reads (or declines),
/// and ``EditReply`` writes the bytes the general reply writer writes.
@Suite("The fast path for edits agrees with the general path")
struct FastPathTests {
    static func scan(_ line: String) -> EditRequest? {
        Array(line.utf8).withUnsafeBytes { EditRequest.scan($0) }
    }

    /// What ``EditRequest/scanRaw(_:)`` makes of `bytes`, checked against the full parser:
    /// whatever it accepts means the same, and its id's bytes (echoed as they are) are
    /// JSON text for the same id. `nil` if declined.
    static func checkRaw(_ bytes: [UInt8]) -> Bool? {
        bytes.withUnsafeBytes { line -> Bool? in
            guard let raw = EditRequest.scanRaw(line) else { return nil }
            guard let full = try? JSONValue(parsing: Array(line)) else { return false }
            let echoed = raw.id.map { try? JSONValue(parsing: Array($0)) }
            return (raw.command == .set ? "set" : "append") == full["cmd"]?.stringValue
                && raw.text == full["text"]?.stringValue && raw.documentPath == full["doc"]?.stringValue
                && raw.idValue == full["id"] && echoed ?? full["id"] == full["id"]
        }
    }

    @Test("Plain set and append requests are read as the full parser reads them")
    func accepted() throws {
        let lines = [
            #"{"id":1,"cmd":"set","doc":"bench/c1.txt","text":"hello"}"#,
            #"{"cmd":"append","doc":"a.txt","text":"line\n"}"#,
            #" { "text" : "x\"y\\z\/\t\r\b\f" , "doc":"d/é.txt", "cmd":"set", "id":"req-7" } "#,
            #"{"id":-12,"cmd":"set","doc":"n.json","text":"{\"a\":1}"}"#,
            #"{"id":null,"cmd":"append","doc":"a.txt","text":""}"#,
            #"{"id":true,"cmd":"append","doc":"a.txt","text":"日本語 ✓"}"#,
            #"{"id":0,"cmd":"set","doc":"a.txt","text":"0"}"#,
        ]
        for line in lines {
            let fast = try #require(Self.scan(line), "declined: \(line)")
            let full = try JSONValue(parsing: line)
            #expect(fast.id == full["id"], "\(line)")
            #expect(fast.document == full["doc"]?.stringValue, "\(line)")
            #expect(fast.text == full["text"]?.stringValue, "\(line)")
            #expect((fast.command == .set ? "set" : "append") == full["cmd"]?.stringValue, "\(line)")
        }
        // One scanner reads them all: plain ids and paths in place, escaped ones decoded.
        let inPlace = lines.map { Self.checkRaw(Array($0.utf8)) }
        #expect(inPlace == [true, true, true, true, true, true, true])
        #expect(Self.checkRaw(Array(#"{"id":"req-7","cmd":"set","doc":"x/y.txt","text":"\"\n"}"#.utf8)) == true)
        #expect(Self.checkRaw(Array(#"{"id":"a\"b","cmd":"set","doc":"x.txt","text":""}"#.utf8)) == true)
        #expect(Self.checkRaw(Array(#"{"id":1,"cmd":"set","doc":"x\/y.txt","text":""}"#.utf8)) == true)
        #expect(Self.checkRaw(Array("{\"id\":1,\"cmd\":\"set\",\"doc\":\"x\u{7F}.txt\",\"text\":\"\"}".utf8)) == true)
    }

    @Test("Anything but the plain form is left to the full parser, valid or not")
    func declined() {
        let lines = [
            #"{"id":1,"cmd":"get","doc":"a.txt"}"#,  // another command
            #"{"cmd":"set","doc":"a.txt","json":{"a":1}}"#,  // another field
            #"{"cmd":"set","doc":"a.txt","text":"a","wait":true}"#,
            #"{"cmd":"set","doc":"a.txt"}"#,  // no text: the general path says what is missing
            #"{"cmd":"set","text":"a"}"#,  // no doc
            #"{"cmd":"set","doc":"a.txt","text":"a","text":"b"}"#,  // a member twice
            #"{"id":{"n":1},"cmd":"set","doc":"a.txt","text":"a"}"#,  // a nested id
            #"{"id":1.5,"cmd":"set","doc":"a.txt","text":"a"}"#,  // a number that is not a plain integer
            #"{"id":01,"cmd":"set","doc":"a.txt","text":"a"}"#,  // not JSON
            #"{"cmd":"set","doc":"a.txt","text":"\u00e9"}"#,  // a \u escape
            #"{"cmd":"set","doc":"a.txt","text":"a"} trailing"#,
            #"{"cmd":"set","doc":"a.txt","text":"a""#,  // cut short
            "{\"cmd\":\"set\",\"doc\":\"a.txt\",\"text\":\"a\tb\"}",  // a raw tab in a string
            #"{"cmd":"set","doc":"a.txt","text":5}"#,
            #"{"cmd":"SET","doc":"a.txt","text":"a"}"#,
            "[1,2]", "", "{}",
        ]
        for line in lines {
            #expect(Self.scan(line) == nil, "\(line)")
            #expect(Self.checkRaw(Array(line.utf8)) == nil, "\(line)")
        }
        // Bytes that are not UTF-8 are declined too (the full parser names the problem).
        let invalid: [UInt8] = Array(#"{"cmd":"set","doc":"a.txt","text":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8)
        #expect(invalid.withUnsafeBytes { EditRequest.scan($0) } == nil)
    }

    @Test("Random mutations of requests: whatever the scanner accepts, the full parser reads the same way")
    func mutations() throws {
        var generator = SystemRandomNumberGenerator()
        let seeds = [
            #"{"id":12,"cmd":"set","doc":"a/b.txt","text":"x\ny \"q\""}"#,
            #"{"cmd":"append","doc":"c.json","text":"{}","id":"s"}"#,
        ]
        let alphabet = Array(#"{}[]":,\ "0123456789-.abcdtexnuilr"#.utf8) + [0x09, 0x0A, 0xC3, 0xA9, 0xFF]
        var accepted = 0
        var acceptedRaw = 0
        for _ in 0..<20_000 {
            var bytes = Array(seeds.randomElement(using: &generator)!.utf8)
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let position = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes[position] = alphabet.randomElement(using: &generator)!
                case 1: bytes.insert(alphabet.randomElement(using: &generator)!, at: position)
                default: if bytes.count > 1 { bytes.remove(at: position) }
                }
            }
            if let raw = Self.checkRaw(bytes) {
                #expect(raw, "\(String(decoding: bytes, as: UTF8.self))")
                acceptedRaw += 1
            }
            guard let fast = bytes.withUnsafeBytes({ EditRequest.scan($0) }) else { continue }
            accepted += 1
            let full = try JSONValue(parsing: bytes)
            #expect(fast.id == full["id"] && fast.document == full["doc"]?.stringValue)
            #expect(fast.text == full["text"]?.stringValue)
            #expect((fast.command == .set ? "set" : "append") == full["cmd"]?.stringValue)
        }
        #expect(accepted > 100, "the mutations left some requests in the plain form")
        #expect(acceptedRaw > 50, "the mutations left some requests with a plain id and path")
    }

    @Test("An edit's reply has the bytes the general reply writer gives, for every state and kind of id")
    func replies() {
        let failure = SaveFailure(
            document: "a \"b\".txt", operation: "rename", path: "/root/a \"b\".txt", errno: .noSpace,
            message: "No space left on device", attempts: 2, failedAt: Date(timeIntervalSince1970: 1_764_000_000.5),
            retryAt: Date(timeIntervalSince1970: 1_764_000_004.25))
        let states: [SaveState] = [
            .clean, .dirty, .saving, .scheduled(Date(timeIntervalSince1970: 1_798_761_599.999)),
            .scheduled(Date(timeIntervalSince1970: 951_782_400)),  // 2000-02-29
            .failed(failure),
        ]
        let ids: [JSONValue?] = [
            nil, .number("7"), .number("-123456789012"), .string("id \"quoted\"\n"), .bool(true), .null,
        ]
        let paths = ["bench/c1.txt", "a \"b\"\\c\t.txt", "dé/日本.json"]
        for state in states {
            for id in ids {
                for path in paths {
                    let info = DocumentInfo(
                        path: path, contentType: .plainText, state: state, changeCount: 12_345,
                        savedChangeCount: 12_000, lastSaved: state == .clean ? nil : Date(timeIntervalSince1970: 0.001),
                        saves: 3)
                    var writer = JSONWriter()
                    ControlSession.writeDocumentReply(id: id, info, into: &writer)
                    writer.endLine()
                    let fast = EditReply.withBytes(id: id, info) { Array($0) }
                    #expect(fast == writer.bytes, "\(String(decoding: fast, as: UTF8.self))")
                }
            }
        }
        // A failure far longer than the rest of a reply (a deep root, a long message).
        var long = failure
        long.path = "/" + String(repeating: "deep/", count: 400) + "a.txt"
        long.message = String(repeating: "the disk said no; ", count: 100)
        let info = DocumentInfo(
            path: "a.txt", contentType: .plainText, state: .failed(long), changeCount: 1, savedChangeCount: 0,
            lastSaved: nil, saves: 0)
        var writer = JSONWriter()
        ControlSession.writeDocumentReply(id: .number("1"), info, into: &writer)
        writer.endLine()
        #expect(EditReply.withBytes(id: .number("1"), info) { Array($0) } == writer.bytes)
        #expect(ControlSession.timestamp(Date(timeIntervalSince1970: 1_798_761_599.999)) == "2026-12-31T23:59:59.999Z")
        #expect(ControlSession.timestamp(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
    }

    @Test("A connection's own cache of formatted seconds gives the text a fresh format gives")
    func timestampCache() {
        var kept = EditReply.TimestampCache()
        var generator = SystemRandomNumberGenerator()
        var date = Date(timeIntervalSince1970: 1_798_761_598.5)
        for step in 0..<2_000 {
            // Mostly small steps (the same second again, the next one), sometimes far.
            date += step % 50 == 0 ? Double.random(in: -1e9...1e9, using: &generator) : Double.random(in: 0...0.7)
            let slot: EditReply.TimestampSlot = step % 3 == 0 ? .saveAt : .lastSaved
            var fresh = EditReply.TimestampCache()
            let cached = [UInt8](unsafeUninitializedCapacity: 24) { buffer, count in
                count = EditReply.formatTimestamp(date, into: buffer.baseAddress!, slot: slot, cache: &kept)
            }
            let expected = [UInt8](unsafeUninitializedCapacity: 24) { buffer, count in
                count = EditReply.formatTimestamp(date, into: buffer.baseAddress!, slot: slot, cache: &fresh)
            }
            #expect(cached == expected, "\(date.timeIntervalSince1970)")
            #expect(String(decoding: expected, as: UTF8.self) == ControlSession.timestamp(date))
        }
    }
}
