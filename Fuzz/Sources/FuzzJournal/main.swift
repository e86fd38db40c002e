import FuzzSupport
import Journal
import Posix

/// The journal's record decoder, through replay of segment files made from the input.
///
/// Input: a flags byte (bit 0: recompute every checksum the bytes frame, so that the
/// fuzzer reaches what lies past the CRCs: lengths, LSNs, owners, release marks), then up
/// to four segments, each a name byte (bit 0: named after the base LSN its header gives;
/// otherwise base = the byte's value / 2), a 16-bit length and that many bytes.
///
/// Oracles, against a decoder written here from the format in SegmentFormat.swift:
/// replay delivers exactly the valid records of each segment's valid prefix (header
/// checked, consecutive LSNs from the base, checksums), in LSN order, each LSN once,
/// without release marks and records they release. A record appended after replay gets
/// an LSN above every one delivered; closed and replayed again, the journal delivers the
/// same records and the new one — replay, cutting a torn tail or setting damage aside,
/// never loses a record it delivered.
enum Scratch { static let directory = ScratchDirectory("journal") }

let reservedOwner = UInt64.max

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), a byte at a time from a table
/// made here bit by bit from the polynomial (the product's CRC32C.swift is not used).
let crcTable: [UInt32] = (0..<256).map { index in
    var crc = UInt32(index)
    for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
    return crc
}

func crc32c(_ bytes: ArraySlice<UInt8>, _ initial: UInt32 = 0) -> UInt32 {
    var crc = ~initial
    crcTable.withUnsafeBufferPointer { table in
        for byte in bytes { crc = table[Int(UInt8(truncatingIfNeeded: crc) ^ byte)] ^ (crc >> 8) }
    }
    return ~crc
}

func u32(_ b: [UInt8], _ at: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(b[at + $1]) << (8 * $1) } }
func u64(_ b: [UInt8], _ at: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(b[at + $1]) << (8 * $1) } }
func put32(_ b: inout [UInt8], _ at: Int, _ v: UInt32) {
    for i in 0..<4 { b[at + i] = UInt8(truncatingIfNeeded: v >> (8 * i)) }
}

struct Record: Equatable {
    var lsn: UInt64
    var owner: UInt64
    var payload: [UInt8]
}

/// Makes every record the bytes frame carry its right checksum (and the header its own).
func fixChecksums(_ bytes: inout [UInt8]) {
    guard bytes.count >= 32 else { return }
    put32(&bytes, 28, crc32c(bytes[0..<28]))
    var offset = 32
    while bytes.count - offset >= 8 {
        let length = Int(u32(bytes, offset))
        guard length >= 16, offset + 8 + length <= bytes.count else { return }
        put32(
            &bytes, offset + 4,
            crc32c(bytes[(offset + 8)..<(offset + 8 + length)], crc32c(bytes[offset..<(offset + 4)])))
        offset += 8 + length
    }
}

/// The valid records at the start of a segment named for `base`; empty for a bad header.
func validPrefix(_ bytes: [UInt8], base: UInt64) -> [Record] {
    guard bytes.count >= 32, bytes[0..<8].elementsEqual("ASJOURNL".utf8), u32(bytes, 28) == crc32c(bytes[0..<28]),
        u32(bytes, 8) == 1, u32(bytes, 12) == 32, u64(bytes, 16) == base
    else { return [] }
    var records: [Record] = []
    var offset = 32
    var expected = base
    while bytes.count - offset >= 8 {
        let length = Int(u32(bytes, offset))
        guard length >= 16, length <= 1 << 30, offset + 8 + length <= bytes.count else { break }
        let body = bytes[(offset + 8)..<(offset + 8 + length)]
        guard u32(bytes, offset + 4) == crc32c(body, crc32c(bytes[offset..<(offset + 4)])),
            u64(bytes, offset + 8) == expected
        else { break }
        records.append(Record(lsn: expected, owner: u64(bytes, offset + 16), payload: Array(body.dropFirst(16))))
        expected &+= 1
        offset += 8 + length
    }
    return records
}

func name(base: UInt64) -> String {
    let digits = String(base)
    return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".journal"
}

/// The records replay delivered, and the journal when it started (`nil` when replay refused
/// to start for LSNs near the top, 2^62: SegmentFormat.maximumBase).
func replayAll(_ directory: String) -> (records: [Record], journal: Journal?) {
    let journal: Journal
    do { journal = try Journal(directory: directory, options: JournalOptions(mode: .always)) } catch {
        fail("the journal does not open: \(error)")
    }
    var records: [Record] = []
    do {
        try journal.replay { record in
            records.append(Record(lsn: record.lsn.rawValue, owner: record.owner, payload: Array(record.payload)))
            journal.noteReplayed(owner: record.owner, lsn: record.lsn)
        }
    } catch let failure as JournalFailure where failure.errno == .valueTooLarge {
        _ = journal.close()
        return (records, nil)
    } catch {
        fail("replay fails: \(error)")
    }
    return (records, journal)
}

func fuzzJournal(_ input: [UInt8]) {
    var reader = InputReader(input)
    let flags = reader.byte()
    var segments: [UInt64: [UInt8]] = [:]
    for _ in 0..<4 where !reader.isAtEnd {
        let naming = reader.byte()
        let count = Int(reader.uint16() % 4096)
        var bytes: [UInt8] = []
        for _ in 0..<count where !reader.isAtEnd { bytes.append(reader.byte()) }
        if flags & 1 == 1 { fixChecksums(&bytes) }
        var base = UInt64(naming >> 1)
        if naming & 1 == 1, bytes.count >= 24 { base = u64(bytes, 16) }
        segments[base] = bytes
    }
    let directory = Scratch.directory.path + "/journal"
    removeTree(directory)
    mkdir(directory, 0o700)
    for (base, bytes) in segments { writeFile(directory + "/" + name(base: base), bytes) }

    // The reference: valid prefixes in base order, release marks applied, each LSN once, rising.
    var released: [UInt64: UInt64] = [:]
    var candidates: [Record] = []
    // Names above 2^62 are not segments' (SegmentFormat.maximumBase).
    for base in segments.keys.sorted() where base <= 1 << 62 {
        for record in validPrefix(segments[base]!, base: base) {
            if record.owner == reservedOwner, record.payload.count == 16 {
                let owner = u64(record.payload, 0)
                // A mark covers the owner's records before it, never one after it.
                released[owner] = max(
                    released[owner] ?? 0, min(u64(record.payload, 8), record.lsn == 0 ? 0 : record.lsn - 1))
            }
            candidates.append(record)
        }
    }
    var expected: [Record] = []
    var walked: UInt64 = 0
    for record in candidates where record.lsn > walked {
        walked = record.lsn
        if record.owner == reservedOwner { continue }
        if let through = released[record.owner], record.lsn <= through { continue }
        expected.append(record)
    }

    // Every LSN replay sees lies within a segment's size of its base (at most 4096 bytes here).
    let high = segments.keys.contains { $0 <= 1 << 62 && $0 + 512 > 1 << 62 }
    let (first, started) = replayAll(directory)
    check(
        first == expected,
        "replay delivered \(first.map(\.lsn)) where the format says \(expected.map(\.lsn))\ninput: \(show(input))")
    guard let journal = started else {
        check(high, "replay refused to start (EOVERFLOW) on LSNs that are not near the top: \(show(input))")
        return
    }
    let payload = Array("after replay".utf8)
    let lsn: LSN
    do { lsn = try journal.append(owner: 7, payload: payload) } catch { fail("append after replay: \(error)") }
    check(
        lsn.rawValue > (first.last?.lsn ?? 0),
        "a new record got LSN \(lsn), not above the replayed \(first.last?.lsn ?? 0)")
    journal.flush()
    if let failure = journal.close() { fail("close: \(failure)") }

    let (second, again) = replayAll(directory)
    check(again != nil || high, "the second replay refused to start on LSNs that are not near the top: \(show(input))")
    _ = again?.close()
    let want = first + [Record(lsn: lsn.rawValue, owner: 7, payload: payload)]
    check(
        second == want,
        "the second replay delivered \(second.map(\.lsn)), expected \(want.map(\.lsn))\ninput: \(show(input))")
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzJournal(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
