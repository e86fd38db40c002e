import Foundation
import Testing

@testable import Autosave

@Suite("Journal entries: every edit encoded as the journal takes it and decoded back")
struct JournalEntryTests {
    /// Strings of each kind the encoder meets: empty, ASCII, multi-byte UTF-8, small
    /// (stored inline in the string value), large, and bridged from Foundation (whose
    /// bytes are not contiguous UTF-8 until copied).
    static let strings: [String] = [
        "", "a", "buy milk\n", "naïve — ✓ 🎉\n", String(repeating: "0123456789", count: 500),
        NSString(string: "from Foundation: ünïcode").description,
        String(decoding: Array("{\"k\": [1, 2, 3]}".utf8), as: UTF8.self),
    ]

    static var edits: [DocumentEdit] {
        strings.flatMap { text -> [DocumentEdit] in
            [
                .setText(text), .append(text), .setJSON(text), .mergePatch(text), .removeMember(text),
                .replace(offset: 3, length: text.utf8.count, with: text),
                .putMember(text, Data(text.utf8)), .setData(Data(text.utf8)),
            ]
        }
    }

    @Test("encodeEdit, then init(decoding:), gives the edit and its token back; the size stays within its bound")
    func roundTrip() throws {
        for (index, edit) in Self.edits.enumerated() {
            let token = UInt64(index) * 0x0101_0101_0101 + 1
            var bytes: [UInt8] = [0xEE]  // as in a batch: the record starts after other bytes
            JournalEntry.encodeEdit(token: token, edit, appendingTo: &bytes)
            #expect(bytes.count - 1 <= JournalEntry.editSizeBound(edit), "\(edit)")
            let decoded = try JournalEntry(decoding: bytes[1...])
            #expect(decoded == .edit(token: token, edit))
        }
    }

    @Test("A text edit's encoding: kind 2, the token, the edit's kind, the text's length and bytes")
    func layout() {
        var bytes: [UInt8] = []
        JournalEntry.encodeEdit(token: 0x0102_0304_0506_0708, .append("hé"), appendingTo: &bytes)
        #expect(bytes == [2, 8, 7, 6, 5, 4, 3, 2, 1, 2, 3, 0, 0, 0, 0x68, 0xC3, 0xA9])
    }

    @Test(
        "The records that are not edits — base, saving, moved, a package member's version before an edit — decode to what was encoded; a flag byte with unknown bits is refused"
    )
    func markers() throws {
        let file = FileIdentity(size: 12, hash: 0xDEAD_BEEF_0BAD_F00D)
        var entries: [JournalEntry] = []
        for text in Self.strings {
            entries += [
                .base(path: text, file: file, token: 7, contents: Data(text.utf8)),
                .base(path: text, file: nil, token: 0, contents: nil),
                .saving(path: text, token: 9, file: file), .moved(path: text),
                .memberBefore(token: 3, member: text, file: file), .memberBefore(token: 4, member: text, file: nil),
            ]
        }
        entries += [.skipped(from: 3, through: 3), .skipped(from: 1, through: .max)]
        for entry in entries {
            var bytes: [UInt8] = []
            entry.encode(into: &bytes)
            #expect(try JournalEntry(decoding: bytes[...]) == entry)
            guard case .other(let peeked) = try JournalEntry.peek(bytes[...]) else {
                Issue.record("\(entry) peeked as an edit")
                continue
            }
            #expect(peeked == entry)
        }
        var bytes: [UInt8] = []
        JournalEntry.memberBefore(token: 1, member: "m", file: nil).encode(into: &bytes)
        bytes[9] = 2
        #expect(throws: JournalEntry.DecodingError.self) { try JournalEntry(decoding: bytes[...]) }
        // Skipped changes run forwards, from change 1 on.
        for (from, through): (UInt64, UInt64) in [(5, 4), (0, 3)] {
            JournalEntry.skipped(from: 1, through: 1).encode(into: &bytes)
            bytes.replaceSubrange(
                1..<17, with: withUnsafeBytes(of: (from.littleEndian, through.littleEndian), Array.init))
            #expect(throws: JournalEntry.DecodingError.self) { try JournalEntry(decoding: bytes[...]) }
        }
    }
}
