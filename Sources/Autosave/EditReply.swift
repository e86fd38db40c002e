import CLinux
import Control
import Documents
import Foundation
import Posix

/// The reply to an edit — `{"id":…,"ok":true,"document":{…}}` and its newline — written
/// with plain stores into a buffer sized for the worst case, then queued with one copy.
/// The same bytes as ``ControlSession/writeDocumentReply(id:_:into:)``; this is the path
/// of the most frequent requests, where the checks of appending byte by byte to an array
/// were a measurable part of the cost.
struct EditReply {
    private var base: UnsafeMutablePointer<UInt8>
    private(set) var count = 0

    /// Writes the reply to `info` for a request whose id has the JSON text `id` and calls `body` with its bytes.
    static func withBytes<R>(id: LineBytes?, _ info: DocumentInfo, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let idText = id?.array
        let outcome = EditOutcome(
            contentType: info.contentType, state: info.state, changeCount: info.changeCount,
            savedChangeCount: info.savedChangeCount, lastSaved: info.lastSaved, saves: info.saves)
        guard let idText else { return withBytes(idText: nil, path: info.path, outcome, body) }
        return idText.withUnsafeBytes { withBytes(idText: $0, path: info.path, outcome, body) }
    }

    /// The part of an edit's reply that names the document,
    /// `"ok":true,"document":{"doc":…,"type":…,"state":"`, written from the path and the
    /// type's identifier at each reply: their bytes as they are, quoted, unless one needs
    /// an escape (then the general writer's text). Nothing is kept with the document: a
    /// copy kept there was one more line of memory for an edit to miss in the cache.
    struct DocumentPart {
        let path: String
        let type: String
        /// The JSON text of each when it needs escapes, else `nil`.
        let escapedPath: [UInt8]?
        let escapedType: [UInt8]?

        init(path: String, type: UTType) {
            self.path = path
            self.type = type.identifier
            escapedPath = Self.escaped(path)
            escapedType = Self.escaped(self.type)
        }

        /// The bytes it takes.
        var count: Int {
            Self.opening.utf8CodeUnitCount + Self.typeKey.utf8CodeUnitCount + Self.stateKey.utf8CodeUnitCount
                + (escapedPath?.count ?? path.utf8.count + 2) + (escapedType?.count ?? type.utf8.count + 2)
        }

        static let opening: StaticString = #""ok":true,"document":{"doc":"#
        static let typeKey: StaticString = #","type":"#
        static let stateKey: StaticString = #","state":""#

        /// `text`'s JSON string when its bytes cannot stand between quotes as they are
        /// (a quote, a backslash, a control character: ``JSONWriter/string(_:)``'s escapes).
        private static func escaped(_ text: String) -> [UInt8]? {
            let plain = text.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
                // Sixteen bytes at a time while none is a quote, a backslash, a control
                // character or outside ASCII (the decoder's scan), then one at a time.
                guard let start = bytes.baseAddress else { return true }
                var index = clinux_json_plain_prefix(start, bytes.count)
                while index < bytes.count {
                    let byte = bytes[index]
                    if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return false }
                    index += 1
                }
                return true
            }
            if plain == true { return nil }
            var writer = JSONWriter()
            writer.string(text)
            return writer.bytes
        }
    }

    /// Queues ``withBytes(idText:path:_:_:)``'s reply on `connection` (written in
    /// place, without a closure to hold the connection).
    static func send(
        idText: UnsafeRawBufferPointer?, path: String, _ outcome: EditOutcome, to connection: Connection,
        timestamps: inout TimestampCache
    ) {
        let document = DocumentPart(path: path, type: outcome.contentType)
        let failure = failureText(outcome.state)
        let capacity = capacity(idText: idText, document: document, failure: failure)
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            let count = write(
                idText: idText, document: document, outcome, failure: failure, into: buffer, capacity: capacity,
                timestamps: &timestamps)
            connection.send(line: UnsafeRawBufferPointer(start: buffer.baseAddress, count: count))
        }
    }

    /// Writes the reply to an edit that left the document at `path` as `outcome` says,
    /// for a request whose `id` has the JSON text `idText`, and calls `body` with its bytes.
    static func withBytes<R>(
        idText: UnsafeRawBufferPointer?, path: String, _ outcome: EditOutcome, _ body: (UnsafeRawBufferPointer) -> R
    ) -> R {
        let document = DocumentPart(path: path, type: outcome.contentType)
        let failure = failureText(outcome.state)
        let capacity = capacity(idText: idText, document: document, failure: failure)
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            let count = sharedSeconds.withLock { timestamps in
                write(
                    idText: idText, document: document, outcome, failure: failure, into: buffer, capacity: capacity,
                    timestamps: &timestamps)
            }
            return body(UnsafeRawBufferPointer(start: buffer.baseAddress, count: count))
        }
    }

    /// A failure's description (rare), written by the general writer; empty for any other state.
    private static func failureText(_ state: SaveState) -> [UInt8] {
        guard case .failed(let saveFailure) = state else { return [] }
        var writer = JSONWriter()
        ControlSession.describe(saveFailure, into: &writer)
        return writer.bytes
    }

    /// The room a reply needs: `{"id":,`, a state's name, three integers, two timestamps,
    /// their keys and `}}\n` are bounded; the id, the document's part and a failure are counted.
    private static func capacity(idText: UnsafeRawBufferPointer?, document: DocumentPart, failure: [UInt8]) -> Int {
        256 + (idText?.count ?? 0) + document.count + failure.count
    }

    private static func write(
        idText: UnsafeRawBufferPointer?, document: DocumentPart, _ outcome: EditOutcome, failure: [UInt8],
        into buffer: UnsafeMutableBufferPointer<UInt8>, capacity: Int, timestamps: inout TimestampCache
    ) -> Int {
        var reply = EditReply(base: buffer.baseAddress!)
        reply.put("{")
        if let idText {
            reply.put("\"id\":")
            reply.putBytes(idText)
            reply.put(",")
        }
        reply.put(document)
        reply.put(outcome.state.staticName)
        reply.put("\",\"changes\":")
        reply.putInteger(outcome.changeCount)
        reply.put(",\"saved_changes\":")
        reply.putInteger(outcome.savedChangeCount)
        reply.put(",\"saves\":")
        reply.putInteger(UInt64(outcome.saves))
        reply.put(",\"last_saved\":")
        if let saved = outcome.lastSaved {
            reply.putTimestamp(saved, slot: .lastSaved, cache: &timestamps)
        } else {
            reply.put("null")
        }
        switch outcome.state {
        case .scheduled(let at):
            reply.put(",\"save_at\":")
            reply.putTimestamp(at, slot: .saveAt, cache: &timestamps)
        case .failed:
            reply.put(",\"failure\":")
            failure.withUnsafeBytes { reply.putBytes($0) }
        default: break
        }
        reply.put("}}\n")
        precondition(reply.count <= capacity, "an edit reply outgrew its buffer")
        return reply.count
    }

    private init(base: UnsafeMutablePointer<UInt8>) { self.base = base }

    private mutating func put(_ text: StaticString) {
        (base + count).update(from: text.utf8Start, count: text.utf8CodeUnitCount)
        count += text.utf8CodeUnitCount
    }

    private mutating func put(_ document: DocumentPart) {
        put(DocumentPart.opening)
        putString(document.path, escaped: document.escapedPath)
        put(DocumentPart.typeKey)
        putString(document.type, escaped: document.escapedType)
        put(DocumentPart.stateKey)
    }

    /// `text` between quotes, or its JSON text when it has one of its own.
    private mutating func putString(_ text: String, escaped: [UInt8]?) {
        if let escaped {
            escaped.withUnsafeBytes { putBytes($0) }
            return
        }
        base[count] = UInt8(ascii: "\"")
        count += 1
        // A string whose bytes are not contiguous has an escaped text (``DocumentPart``).
        _ = text.utf8.withContiguousStorageIfAvailable { putBytes(UnsafeRawBufferPointer($0)) }
        base[count] = UInt8(ascii: "\"")
        count += 1
    }

    private mutating func putBytes(_ bytes: UnsafeRawBufferPointer) {
        guard let start = bytes.baseAddress else { return }
        UnsafeMutableRawPointer(base + count).copyMemory(from: start, byteCount: bytes.count)
        count += bytes.count
    }

    private mutating func putInteger(_ value: UInt64) {
        var digits = 1
        var rest = value / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        var value = value
        for position in stride(from: count + digits - 1, through: count, by: -1) {
            base[position] = UInt8(ascii: "0") + UInt8(value % 10)
            value /= 10
        }
        count += digits
    }

    /// `"2026-11-29T18:11:15.662Z"`, quotes included.
    private mutating func putTimestamp(_ date: Date, slot: TimestampSlot, cache: inout TimestampCache) {
        base[count] = UInt8(ascii: "\"")
        count += 1
        count += Self.formatTimestamp(date, into: base + count, slot: slot, cache: &cache)
        base[count] = UInt8(ascii: "\"")
        count += 1
    }

    /// Writes `date` as `2026-11-29T18:11:15.662Z` (UTC, milliseconds; 24 bytes) at
    /// `out`, computed without Foundation's formatters or the C library's `gmtime` (the
    /// civil date from the day number, as in Howard Hinnant's `civil_from_days`).
    static func formatTimestamp(
        _ date: Date, into out: UnsafeMutablePointer<UInt8>, slot: TimestampSlot = .lastSaved
    ) -> Int {
        sharedSeconds.withLock { formatTimestamp(date, into: out, slot: slot, cache: &$0) }
    }

    /// ``formatTimestamp(_:into:slot:)`` with the caller's own cache of formatted seconds
    /// (a connection keeps one: no lock to take).
    static func formatTimestamp(
        _ date: Date, into out: UnsafeMutablePointer<UInt8>, slot: TimestampSlot, cache: inout TimestampCache
    ) -> Int {
        let milliseconds = Int((date.timeIntervalSince1970 * 1000).rounded(.down))
        var (second, millisecond) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        if millisecond < 0 {
            second -= 1
            millisecond += 1000
        }
        // The date and time to the second change once a second: kept from the last call
        // for the same slot (an edit's reply has two timestamps, its last save and its
        // next, usually seconds apart).
        let kept = slot == .lastSaved ? cache.lastSaved : cache.saveAt
        if kept.second == second {
            withUnsafeBytes(of: kept.text) { out.update(from: $0.bindMemory(to: UInt8.self).baseAddress!, count: 20) }
        } else {
            formatSecond(second, into: out)
            var text: Text20 = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &text) { $0.copyMemory(from: UnsafeRawBufferPointer(start: out, count: 20)) }
            if slot == .lastSaved { cache.lastSaved = (second, text) } else { cache.saveAt = (second, text) }
        }
        out[20] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: millisecond / 100)
        out[21] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: millisecond / 10 % 10)
        out[22] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: millisecond % 10)
        out[23] = UInt8(ascii: "Z")
        return 24
    }

    fileprivate typealias Text20 = (
        UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
        UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8
    )
    fileprivate typealias FormattedSecond = (second: Int, text: Text20)
    fileprivate static let unformatted: FormattedSecond = (
        Int.min, (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    )
    /// Which kind of timestamp is written: each keeps its own last second.
    enum TimestampSlot { case lastSaved, saveAt }
    /// The second last formatted for each slot, with its first 20 bytes (`2026-11-29T18:11:15.`).
    struct TimestampCache {
        fileprivate var lastSaved = EditReply.unformatted
        fileprivate var saveAt = EditReply.unformatted
    }
    /// The cache of callers that keep none.
    private static let sharedSeconds = Lock(TimestampCache())

    /// `2026-11-29T18:11:15.` for `second` since 1970 (the civil date from the day number).
    private static func formatSecond(_ second: Int, into out: UnsafeMutablePointer<UInt8>) {
        var (day, secondOfDay) = second.quotientAndRemainder(dividingBy: 86_400)
        if secondOfDay < 0 {
            day -= 1
            secondOfDay += 86_400
        }
        let z = day + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let monthDay = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func digits(_ value: Int, _ width: Int, at offset: Int) {
            var value = value
            var position = offset + width - 1
            while position >= offset {
                out[position] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: value % 10)
                value /= 10
                position -= 1
            }
        }
        digits(year, 4, at: 0)
        out[4] = UInt8(ascii: "-")
        digits(month, 2, at: 5)
        out[7] = UInt8(ascii: "-")
        digits(monthDay, 2, at: 8)
        out[10] = UInt8(ascii: "T")
        digits(secondOfDay / 3600, 2, at: 11)
        out[13] = UInt8(ascii: ":")
        digits(secondOfDay / 60 % 60, 2, at: 14)
        out[16] = UInt8(ascii: ":")
        digits(secondOfDay % 60, 2, at: 17)
        out[19] = UInt8(ascii: ".")
    }
}
