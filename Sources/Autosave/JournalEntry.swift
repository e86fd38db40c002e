import Documents
import Foundation
import Posix

/// What the store writes to the edit journal about one document (the journal's owner
/// number is the document's), encoded as the journal record's payload.
///
/// A document's records form a chain: a ``base`` names the document and identifies the
/// version on disk its edits apply to; each ``edit`` is one operation with the change
/// count it produced; a ``saving`` record, written by the save right before its rename,
/// identifies the file that save puts in place, so that the edits after it apply on top
/// of that file after a crash; ``moved`` follows a rename by another program. A chain
/// ends with the journal's release of its records (a durable save, a revert, a close).
/// Replay reads the chain back (``DocumentStore/openJournal()``).
///
/// Encoding: one kind byte, then the fields, integers little-endian, strings and bytes
/// as a `u32` length and the bytes.
enum JournalEntry: Equatable {
    /// The version on disk the edits that follow apply to (`nil`: no file, a new document;
    /// for a package, ``FileIdentity/packageOnDisk`` or `nil`),
    /// the change count it holds, and — when the first edit does not replace the whole
    /// document and the document is small — its contents, so that the edits' version can
    /// be rebuilt even if another program replaces the file.
    case base(path: String, file: FileIdentity?, token: UInt64, contents: Data?)
    /// An edit; `token` is the document's change count after it.
    case edit(token: UInt64, DocumentEdit)
    /// A save about to put the file `file` in place holding the edits through `token`.
    case saving(path: String, token: UInt64, file: FileIdentity)
    /// Another program renamed the document's file to `path`; the document followed it.
    case moved(path: String)
    /// What the package member `member` was right before the edit that makes change
    /// `token` (`nil`: no such member), written before that edit's record: replay tells by
    /// it a member another program changed while the daemon was down from one the
    /// package's own saves wrote.
    case memberBefore(token: UInt64, member: String, file: FileIdentity?)
    /// A replay stopped short (a gap, an edit refused): the edits making changes
    /// `from...through` were not applied, and the edits after `through` follow the version
    /// at change `from - 1` — the one that replay made. A package's version cannot be
    /// carried by a base with contents, as a file's is: a later replay, reaching change
    /// `from - 1` again, passes over the edits left unapplied to the edits made since.
    case skipped(from: UInt64, through: UInt64)

    /// The largest document whose contents a ``base`` carries.
    static let baseContentsLimit = 64 << 10

    fileprivate enum Kind: UInt8 {
        case base = 1
        case edit = 2
        case saving = 3
        case moved = 4
        case memberBefore = 5
        case skipped = 6
    }

    fileprivate enum EditKind: UInt8 {
        case setText = 1
        case append = 2
        case replace = 3
        case setJSON = 4
        case mergePatch = 5
        case putMember = 6
        case removeMember = 7
        case setData = 8

        /// The protocol command that makes an edit of this kind.
        var command: EditCommand {
            switch self {
            case .setText, .setJSON, .setData: .set
            case .append: .append
            case .replace: .replace
            case .mergePatch: .patch
            case .putMember: .putMember
            case .removeMember: .removeMember
            }
        }
    }

    // MARK: Encoding

    func encode(into bytes: inout [UInt8]) {
        bytes.removeAll(keepingCapacity: true)
        switch self {
        case .base(let path, let file, let token, let contents):
            bytes.append(Kind.base.rawValue)
            bytes.appendLittleEndian(token)
            bytes.append((file == nil ? 0 : 1) | (contents == nil ? 0 : 2))
            if let file { file.encode(into: &bytes) }
            bytes.appendString(path)
            if let contents { bytes.appendBytes(contents) }
        case .edit(let token, let edit):
            bytes.append(Kind.edit.rawValue)
            bytes.appendLittleEndian(token)
            Self.encode(edit, into: &bytes)
        case .saving(let path, let token, let file):
            bytes.append(Kind.saving.rawValue)
            bytes.appendLittleEndian(token)
            file.encode(into: &bytes)
            bytes.appendString(path)
        case .moved(let path):
            bytes.append(Kind.moved.rawValue)
            bytes.appendString(path)
        case .memberBefore(let token, let member, let file):
            bytes.append(Kind.memberBefore.rawValue)
            bytes.appendLittleEndian(token)
            bytes.append(file == nil ? 0 : 1)
            if let file { file.encode(into: &bytes) }
            bytes.appendString(member)
        case .skipped(let from, let through):
            bytes.append(Kind.skipped.rawValue)
            bytes.appendLittleEndian(from)
            bytes.appendLittleEndian(through)
        }
    }

    /// At most how many bytes ``encodeEdit(token:_:appendingTo:)`` appends for `edit`: what
    /// the journal holds against its record limit before the edit is encoded into its batch.
    static func editSizeBound(_ edit: DocumentEdit) -> Int {
        // The entry's kind and token, the edit's kind, a replace's offset and length; a
        // length prefix (``appendLength(_:)``) takes 4 bytes.
        let fixed = 1 + 8 + 1 + 16
        let prefix = 4
        switch edit {
        case .setText(let text), .append(let text), .replace(_, _, let text), .setJSON(let text),
            .mergePatch(let text), .removeMember(let text):
            return fixed + prefix + text.utf8.count
        case .putMember(let member, let data): return fixed + 2 * prefix + member.utf8.count + data.count
        case .setData(let data): return fixed + prefix + data.count
        }
    }

    /// An edit record appended to `bytes` (the path every edit takes: straight into the
    /// journal's batch).
    @inline(__always)
    static func encodeEdit(token: UInt64, _ edit: DocumentEdit, appendingTo bytes: inout [UInt8]) {
        // The edits of one string (nearly all of them): the entry's kind, the token, the
        // edit's kind and the string's length in one append, then the string's bytes.
        switch edit {
        case .setText(let text): bytes.appendEdit(token: token, .setText, text)
        case .append(let text): bytes.appendEdit(token: token, .append, text)
        case .setJSON(let text): bytes.appendEdit(token: token, .setJSON, text)
        case .mergePatch(let text): bytes.appendEdit(token: token, .mergePatch, text)
        case .removeMember(let member): bytes.appendEdit(token: token, .removeMember, member)
        default:
            bytes.append(Kind.edit.rawValue)
            bytes.appendLittleEndian(token)
            encode(edit, into: &bytes)
        }
    }

    private static func encode(_ edit: DocumentEdit, into bytes: inout [UInt8]) {
        switch edit {
        case .setText(let text):
            bytes.append(EditKind.setText.rawValue)
            bytes.appendString(text)
        case .append(let text):
            bytes.append(EditKind.append.rawValue)
            bytes.appendString(text)
        case .replace(let offset, let length, let text):
            bytes.append(EditKind.replace.rawValue)
            bytes.appendLittleEndian(UInt64(bitPattern: Int64(offset)))
            bytes.appendLittleEndian(UInt64(bitPattern: Int64(length)))
            bytes.appendString(text)
        case .setJSON(let text):
            bytes.append(EditKind.setJSON.rawValue)
            bytes.appendString(text)
        case .mergePatch(let text):
            bytes.append(EditKind.mergePatch.rawValue)
            bytes.appendString(text)
        case .putMember(let member, let data):
            bytes.append(EditKind.putMember.rawValue)
            bytes.appendString(member)
            bytes.appendBytes(data)
        case .removeMember(let member):
            bytes.append(EditKind.removeMember.rawValue)
            bytes.appendString(member)
        case .setData(let data):
            bytes.append(EditKind.setData.rawValue)
            bytes.appendBytes(data)
        }
    }

    // MARK: Decoding

    /// Why a record's payload could not be read.
    struct DecodingError: Error, CustomStringConvertible {
        var description: String
    }

    init(decoding payload: ArraySlice<UInt8>) throws(DecodingError) {
        var reader = ByteReader(payload)
        guard let raw = reader.byte(), let kind = Kind(rawValue: raw) else {
            throw DecodingError(description: "unknown record kind \(payload.first.map(String.init) ?? "(empty)")")
        }
        switch kind {
        case .base:
            let token = try reader.integer()
            guard let flags = reader.byte(), flags & ~3 == 0 else { throw DecodingError(description: "bad base flags") }
            let file = flags & 1 != 0 ? try FileIdentity(reading: &reader) : nil
            let path = try reader.string()
            let contents = flags & 2 != 0 ? try reader.data() : nil
            self = .base(path: path, file: file, token: token, contents: contents)
        case .edit:
            let token = try reader.integer()
            self = .edit(token: token, try Self.decodeEdit(&reader))
        case .saving:
            let token = try reader.integer()
            let file = try FileIdentity(reading: &reader)
            self = .saving(path: try reader.string(), token: token, file: file)
        case .moved:
            self = .moved(path: try reader.string())
        case .memberBefore:
            let token = try reader.integer()
            guard let flags = reader.byte(), flags & ~1 == 0 else {
                throw DecodingError(description: "bad member flags")
            }
            let file = flags & 1 != 0 ? try FileIdentity(reading: &reader) : nil
            self = .memberBefore(token: token, member: try reader.string(), file: file)
        case .skipped:
            let from = try reader.integer()
            let through = try reader.integer()
            guard from > 0, from <= through else {
                throw DecodingError(description: "bad skipped changes \(from)...\(through)")
            }
            self = .skipped(from: from, through: through)
        }
        guard reader.isAtEnd else { throw DecodingError(description: "\(reader.remaining) bytes after the record") }
    }

    /// A record as replay first reads it: an edit's change count and command, its payload
    /// checked as ``init(decoding:)`` would check it but not decoded (no string or data is
    /// made: most edits of a long chain are superseded by a later `set`, and the rest are
    /// decoded one at a time as they are applied); any other record decoded whole.
    enum Peeked {
        case edit(token: UInt64, command: EditCommand)
        case other(JournalEntry)
    }

    static func peek(_ payload: ArraySlice<UInt8>) throws(DecodingError) -> Peeked {
        guard payload.first == Kind.edit.rawValue else { return .other(try JournalEntry(decoding: payload)) }
        var reader = ByteReader(payload)
        _ = reader.byte()
        let token = try reader.integer()
        guard let kind = reader.byte().flatMap(EditKind.init(rawValue:)) else {
            throw DecodingError(description: "unknown edit kind")
        }
        switch kind {
        case .setText, .append, .setJSON, .mergePatch, .removeMember: try reader.skipString()
        case .replace:
            _ = try reader.integer()
            _ = try reader.integer()
            try reader.skipString()
        case .putMember:
            try reader.skipString()
            try reader.skipData()
        case .setData: try reader.skipData()
        }
        guard reader.isAtEnd else { throw DecodingError(description: "\(reader.remaining) bytes after the record") }
        return .edit(token: token, command: kind.command)
    }

    private static func decodeEdit(_ reader: inout ByteReader) throws(DecodingError) -> DocumentEdit {
        guard let raw = reader.byte(), let kind = EditKind(rawValue: raw) else {
            throw DecodingError(description: "unknown edit kind")
        }
        switch kind {
        case .setText: return .setText(try reader.string())
        case .append: return .append(try reader.string())
        case .replace:
            let offset = Int64(bitPattern: try reader.integer())
            let length = Int64(bitPattern: try reader.integer())
            return .replace(offset: Int(offset), length: Int(length), with: try reader.string())
        case .setJSON: return .setJSON(try reader.string())
        case .mergePatch: return .mergePatch(try reader.string())
        case .putMember:
            let member = try reader.string()
            return .putMember(member, try reader.data())
        case .removeMember: return .removeMember(try reader.string())
        case .setData: return .setData(try reader.data())
        }
    }
}

/// The protocol command that makes an edit: what the metrics count edits by, and what
/// tells an edit that gives the whole document (`set`) from one that changes it.
enum EditCommand: Int, CaseIterable, Sendable {
    case set, append, replace, patch, putMember, removeMember

    /// The command's name in the protocol.
    var name: String {
        switch self {
        case .set: "set"
        case .append: "append"
        case .replace: "replace"
        case .patch: "patch"
        case .putMember: "put-member"
        case .removeMember: "remove-member"
        }
    }

    /// Whether its edit gives the whole document, whatever the document held before.
    var replacesWholeDocument: Bool { self == .set }
}

extension DocumentEdit {
    /// The command that makes this edit.
    var command: EditCommand {
        switch self {
        case .setText, .setJSON, .setData: .set
        case .append: .append
        case .replace: .replace
        case .mergePatch: .patch
        case .putMember: .putMember
        case .removeMember: .removeMember
        }
    }

    /// Whether the edit gives the whole document, whatever it held before.
    var replacesWholeDocument: Bool { command.replacesWholeDocument }
}

/// Which version of a file a journal record's edits apply to: its size and the
/// ``StableHash`` of its bytes. Contents, not the inode or the times: those a restore, a
/// copy or a rename by another program change without changing the version, and a
/// rewrite in place can keep them while changing it.
struct FileIdentity: Hashable, Sendable, CustomStringConvertible {
    var size: Int64
    var hash: UInt64

    init(size: Int64, hash: UInt64) {
        self.size = size
        self.hash = hash
    }

    /// What a package's ``JournalEntry/base(path:file:token:contents:)`` names instead of
    /// a file's identity when the package's directory is on disk (read from it, or saved
    /// to it): replay tells by it a package another program removed while the daemon was
    /// down (its edits apply to members that are gone) from a new one not saved yet.
    /// Every package version on disk is this one: its members are looked at one by one.
    static let packageOnDisk = FileIdentity(size: -1, hash: 0)

    /// The identity of `data`, a file's bytes.
    init(_ data: Data) {
        self.init(size: Int64(data.count), hash: StableHash.of(data))
    }

    /// The identity of a regular file's fingerprint (`nil` for a package).
    init?(_ fingerprint: Fingerprint) {
        guard !fingerprint.isDirectory, let hash = fingerprint.contentHash else { return nil }
        self.init(size: fingerprint.size, hash: hash)
    }

    fileprivate init(reading reader: inout ByteReader) throws(JournalEntry.DecodingError) {
        size = Int64(bitPattern: try reader.integer())
        hash = try reader.integer()
    }

    fileprivate func encode(into bytes: inout [UInt8]) {
        bytes.appendLittleEndian(UInt64(bitPattern: size))
        bytes.appendLittleEndian(hash)
    }

    var description: String { "\(size) bytes, hash \(String(hash, radix: 16))" }
}

/// What a save writes on the file it puts in place, as the extended attribute
/// ``attributeName``, set on the temporary before its `fsync` (so durable with its bytes):
/// what a ``JournalEntry/saving(path:token:file:)`` record would say — the journal's
/// identity, the document's owner number, the change count the file holds, the LSN of the
/// document's last record before the save, and the file's size and hash. A save that
/// marks its file writes no `saving` record.
///
/// A power cut (or a crash right after the rename) can leave the file in place while the
/// edits it holds are not all in the journal, and no record names it. Replay would take
/// it for another program's; the mark says it is the save's own. It is believed only for
/// the run that wrote it (the journal's identity, drawn anew at every start: owner
/// numbers and LSNs repeat across runs), for the chain of the owner it names, when its LSN is at or
/// past the chain's first record (an older save's file, put back by somebody, comes from
/// before the chain's records: each save's end releases what it covers and starts a new
/// base), and for a file whose size and hash are the ones it names (another program's
/// rewrite in place keeps the attribute, not the hash). With the mark, a save neither
/// writes nor waits for a journal record before its rename.
struct SaveMark: Equatable {
    static let attributeName = "user.autosaved.save"
    private static let version: UInt8 = 1
    static let size = 1 + 6 * 8

    var journal: UInt64
    var owner: UInt64
    var token: UInt64
    var lsn: UInt64
    var file: FileIdentity

    init(journal: UInt64, owner: UInt64, token: UInt64, lsn: UInt64, file: FileIdentity) {
        self.journal = journal
        self.owner = owner
        self.token = token
        self.lsn = lsn
        self.file = file
    }

    var bytes: [UInt8] {
        var bytes: [UInt8] = [Self.version]
        bytes.reserveCapacity(Self.size)
        for value in [journal, owner, token, lsn] { bytes.appendLittleEndian(value) }
        file.encode(into: &bytes)
        return bytes
    }

    /// `nil` for bytes of another shape or version.
    init?(_ bytes: [UInt8]) {
        guard bytes.count == Self.size, bytes.first == Self.version else { return nil }
        var reader = ByteReader(bytes[1...])
        do throws(JournalEntry.DecodingError) {
            journal = try reader.integer()
            owner = try reader.integer()
            token = try reader.integer()
            lsn = try reader.integer()
            file = try FileIdentity(reading: &reader)
        } catch {
            return nil
        }
    }
}

/// Reads a record's payload front to back.
private struct ByteReader {
    let bytes: ArraySlice<UInt8>
    var position: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        position = bytes.startIndex
    }

    var isAtEnd: Bool { position == bytes.endIndex }
    var remaining: Int { bytes.endIndex - position }

    mutating func byte() -> UInt8? {
        guard position < bytes.endIndex else { return nil }
        defer { position += 1 }
        return bytes[position]
    }

    mutating func integer() throws(JournalEntry.DecodingError) -> UInt64 {
        guard remaining >= 8 else { throw JournalEntry.DecodingError(description: "the record ends inside a number") }
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[position + index]) << (8 * index) }
        position += 8
        return value
    }

    mutating func length() throws(JournalEntry.DecodingError) -> Int {
        guard remaining >= 4 else { throw JournalEntry.DecodingError(description: "the record ends inside a length") }
        var value = 0
        for index in 0..<4 { value |= Int(bytes[position + index]) << (8 * index) }
        position += 4
        guard value <= remaining else {
            throw JournalEntry.DecodingError(description: "a length of \(value) bytes runs past the record")
        }
        return value
    }

    mutating func string() throws(JournalEntry.DecodingError) -> String {
        let count = try length()
        defer { position += count }
        let slice = bytes[position..<position + count]
        // ASCII (the usual case) is valid UTF-8 as it is: made straight from the bytes,
        // without the generic validation's look-ups.
        if Self.isASCII(slice) { return slice.withUnsafeBufferPointer { String(decoding: $0, as: UTF8.self) } }
        guard let string = String(validating: slice, as: UTF8.self) else {
            throw JournalEntry.DecodingError(description: "a string is not UTF-8")
        }
        return string
    }

    /// Whether every byte is below 0x80, eight at a time.
    static func isASCII(_ slice: ArraySlice<UInt8>) -> Bool {
        slice.withUnsafeBytes { raw -> Bool in
            var index = 0
            var high: UInt64 = 0
            while index + 8 <= raw.count {
                high |= raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                index += 8
            }
            while index < raw.count {
                high |= UInt64(raw[index])
                index += 1
            }
            return high & 0x8080_8080_8080_8080 == 0
        }
    }

    /// Passes over a string, checking that it is UTF-8, without making it.
    mutating func skipString() throws(JournalEntry.DecodingError) {
        let count = try length()
        defer { position += count }
        let slice = bytes[position..<position + count]
        guard Self.isASCII(slice) || String(validating: slice, as: UTF8.self) != nil else {
            throw JournalEntry.DecodingError(description: "a string is not UTF-8")
        }
    }

    /// Passes over bytes without copying them.
    mutating func skipData() throws(JournalEntry.DecodingError) {
        position += try length()
    }

    mutating func data() throws(JournalEntry.DecodingError) -> Data {
        let count = try length()
        defer { position += count }
        return Data(bytes[position..<position + count])
    }
}

extension [UInt8] {
    fileprivate mutating func appendLittleEndian(_ value: UInt64) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    fileprivate mutating func appendLength(_ count: Int) {
        Swift.withUnsafeBytes(of: UInt32(truncatingIfNeeded: count).littleEndian) { append(contentsOf: $0) }
    }

    fileprivate mutating func appendString(_ string: String) {
        var string = string
        string.withUTF8 { utf8 in
            appendLength(utf8.count)
            append(contentsOf: utf8)
        }
    }

    /// An edit entry of one string, as ``JournalEntry/encode(_:into:)`` writes it after the
    /// entry's kind and token: its fixed part (14 bytes) in one append.
    @inline(__always)
    fileprivate mutating func appendEdit(token: UInt64, _ kind: JournalEntry.EditKind, _ string: String) {
        func put(_ utf8: UnsafeBufferPointer<UInt8>) {
            appendEditHead(token: token, kind, count: utf8.count)
            append(contentsOf: utf8)
        }
        // A native string's bytes in place; any other's through a copy made contiguous.
        if string.utf8.withContiguousStorageIfAvailable(put) != nil { return }
        var string = string
        string.withUTF8(put)
    }

    @inline(__always)
    private mutating func appendEditHead(token: UInt64, _ kind: JournalEntry.EditKind, count: Int) {
        // kind u8 | token u64 | edit kind u8 | length u32, packed.
        var head: (UInt64, UInt64) = (0, 0)
        Swift.withUnsafeMutableBytes(of: &head) { raw in
            raw.storeBytes(of: JournalEntry.Kind.edit.rawValue, toByteOffset: 0, as: UInt8.self)
            raw.storeBytes(of: token.littleEndian, toByteOffset: 1, as: UInt64.self)
            raw.storeBytes(of: kind.rawValue, toByteOffset: 9, as: UInt8.self)
            raw.storeBytes(
                of: UInt32(truncatingIfNeeded: count).littleEndian, toByteOffset: 10, as: UInt32.self)
        }
        Swift.withUnsafeBytes(of: head) { append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[..<14])) }
    }

    fileprivate mutating func appendBytes(_ data: Data) {
        appendLength(data.count)
        append(contentsOf: data)
    }
}
