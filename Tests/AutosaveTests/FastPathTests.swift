import Control
import Documents
import Foundation
import Posix
import Testing

@testable import Autosave

/// The socket's path for the most frequent requests: ``RequestDecoder`` keeps a plain
/// `set`'s or `append`'s id and path as slices of the line (no string for them), and
/// every reply written straight to bytes has the bytes the general serialiser gives the
/// same reply built as a value.
@Suite("The fast path for edits agrees with the general path")
struct FastPathTests {
    static func decode(_ line: String) -> ControlRequest? {
        Array(line.utf8).withUnsafeBytes { bytes in
            guard case .request(let request) = RequestDecoder.decode(bytes) else { return nil }
            return request.owned()
        }
    }

    /// Whether the id and the document of the request on `line` are slices of the line.
    static func slices(_ line: String) -> (id: Bool, document: Bool)? {
        Array(line.utf8).withUnsafeBytes { bytes in
            guard case .request(let request) = RequestDecoder.decode(bytes) else { return nil }
            switch request.command {
            case .set(.success(let document), _), .append(.success(let document), _):
                return (request.id?.isSlice ?? true, document.bytes.isSlice)
            default: return nil
            }
        }
    }

    @Test("Plain set and append requests keep their id and path as the line's bytes; escaped ones are decoded")
    func plainForms() throws {
        let plain = [
            (#"{"id":1,"cmd":"set","doc":"bench/c1.txt","text":"hello"}"#, "1", "bench/c1.txt", "hello"),
            (#"{"cmd":"append","doc":"a.txt","text":"line\n"}"#, nil, "a.txt", "line\n"),
            (
                #" { "text" : "x\"y\\z\/\t" , "doc":"d/é.txt", "cmd":"set", "id":"req-7" } "#, #""req-7""#, "d/é.txt",
                "x\"y\\z/\t"
            ),
            (#"{"id":-12,"cmd":"set","doc":"n.json","text":"{\"a\":1}"}"#, "-12", "n.json", #"{"a":1}"#),
            (#"{"id":null,"cmd":"append","doc":"a.txt","text":""}"#, "null", "a.txt", ""),
            (#"{"id":true,"cmd":"append","doc":"a.txt","text":"日本語 ✓"}"#, "true", "a.txt", "日本語 ✓"),
        ]
        for (line, id, path, text) in plain {
            let request = try #require(Self.decode(line), "\(line)")
            #expect(request.id?.array == id.map { Array($0.utf8) }, "\(line)")
            switch request.command {
            case .set(.success(let document), .success(.text(let value))),
                .append(.success(let document), .success(let value)):
                #expect(document.path == path && value == text, "\(line)")
            default:
                Issue.record("not a plain edit: \(line)")
            }
            let kept = Self.slices(line)
            #expect(kept?.id == true && kept?.document == true, "no copy of the id or the path: \(line)")
        }
        // Escapes in the path or the id: decoded, and the id echoed as the serialiser writes it.
        let escaped = try #require(Self.decode(#"{"id":"a\/b\u0041","cmd":"set","doc":"x\/y.txt","text":""}"#))
        #expect(escaped.id?.array == Array(#""a/bA""#.utf8))
        guard case .set(.success(let document), _) = escaped.command else {
            Issue.record("not a set")
            return
        }
        #expect(document.bytes.array == Array("x/y.txt".utf8))
        let kept = Self.slices(#"{"id":"a\/b\u0041","cmd":"set","doc":"x\/y.txt","text":""}"#)
        #expect(kept?.id == false && kept?.document == false, "decoded, not slices")
    }

    @Test("Error replies have the bytes of the value the general serialiser writes, for ids of every kind")
    func errorReplies() {
        let ids: [JSONValue?] = [
            nil, .number("7"), .number("-1.5e3"), .string("id \"quoted\"\n\u{1}é"), .bool(false), .null,
            .array([.number("1"), .object([("a", .string("b"))])]),
        ]
        for id in ids {
            for code in ControlProtocol.ErrorCode.allCases {
                let message = "field \"x\" is given more than once\t\u{0}\u{2028}"
                var writer = JSONWriter()
                ControlSession.writeError(
                    id: id.map { LineBytes($0.serializedBytes()) }, code: code, message: message, into: &writer)
                #expect(
                    writer.bytes == ControlProtocol.errorReply(id: id, code: code, message: message).serializedBytes())
            }
        }
    }

    @Test("Events have the bytes of the values they were built as")
    func events() {
        let failure = SaveFailure(
            document: "a.txt", operation: "rename", path: "/root/a.txt", errno: .noSpace,
            message: "No space left on device", attempts: 2, failedAt: Date(timeIntervalSince1970: 1_764_000_000.5),
            retryAt: Date(timeIntervalSince1970: 1_764_000_004.25))
        let cases: [(StoreEvent, JSONValue)] = [
            (
                .saved(document: "a.txt", bytes: 27, duration: .microseconds(700)),
                ["event": "saved", "doc": "a.txt", "bytes": 27, "duration_ms": JSONValue(Double(700) / 1000)]
            ),
            (
                .saved(document: "b", bytes: 0, duration: .seconds(3)),
                ["event": "saved", "doc": "b", "bytes": 0, "duration_ms": JSONValue(Double(3_000))]
            ),
            (
                .saveFailed(failure),
                [
                    "doc": "a.txt", "operation": "rename", "path": "/root/a.txt", "errno": "ENOSPC",
                    "message": "No space left on device", "attempts": 2,
                    "failed_at": .string(ControlSession.timestamp(failure.failedAt)),
                    "retry_at": .string(ControlSession.timestamp(failure.retryAt)), "event": "save-failed",
                ]
            ),
            (.changedOnDisk(document: "a\n"), ["event": "changed-on-disk", "doc": "a\n"]),
            (
                .conflict(document: "a", copy: "a (conflict)", copyHolds: .memory),
                ["event": "conflict", "doc": "a", "copy": "a (conflict)", "copy_holds": "memory"]
            ),
            (.renamed(document: "a", to: "b"), ["event": "renamed", "doc": "a", "to": "b"]),
            (.recreated(document: "a"), ["event": "recreated", "doc": "a"]),
            (.closed(document: "a"), ["event": "closed", "doc": "a"]),
        ]
        for (event, expected) in cases {
            var writer = JSONWriter()
            ControlSession.writeEvent(event, into: &writer)
            #expect(writer.bytes == expected.serializedBytes(), "\(String(decoding: writer.bytes, as: UTF8.self))")
        }
        let all: Set<String> = [
            "saved", "save-failed", "changed-on-disk", "conflict", "recreated", "renamed", "closed",
        ]
        #expect(ControlSession.isWanted(.renamed(document: "a", to: "b"), kinds: all, documents: ["b"]))
        #expect(!ControlSession.isWanted(.closed(document: "a"), kinds: all.subtracting(["closed"]), documents: nil))
        #expect(
            !ControlSession.isWanted(.saved(document: "a", bytes: 1, duration: .zero), kinds: all, documents: ["b"]))
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
        let ids: [LineBytes?] = [
            nil, .number("7"), .number("-123456789012"), .string("id \"quoted\"\n"), .bool(true), .null,
        ].map { (id: JSONValue?) in id.map { LineBytes($0.serializedBytes()) } }
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
        ControlSession.writeDocumentReply(id: LineBytes(Array("1".utf8)), info, into: &writer)
        writer.endLine()
        #expect(EditReply.withBytes(id: LineBytes(Array("1".utf8)), info) { Array($0) } == writer.bytes)
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
