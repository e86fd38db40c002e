/// The on-disk layout of segments and records, described for operators in docs/JOURNAL.md.
///
/// A segment is a 32-byte header followed by records, all integers little-endian:
///
///     header:  magic "ASJOURNL" | version u32 = 1 | header size u32 = 32 | base LSN u64
///              | flags u32 | CRC-32C of the 28 bytes before it
///     record:  length u32 | CRC-32C u32 | LSN u64 | owner u64 | payload
///
/// A record's `length` counts what follows the 8-byte record header (LSN, owner and
/// payload: 16 bytes + the payload). Its CRC-32C covers the 4 length bytes and then
/// those `length` bytes, so a damaged length is caught like damaged contents. The
/// records of one segment carry consecutive LSNs starting at the header's base LSN,
/// which is also the segment's file name (20 decimal digits + `.journal`). A segment's
/// space is reserved when it is made (``Journal/preallocate(_:)``): a record length of
/// zero followed by nothing but zeros is the end of its records. A segment made from the
/// file of an obsolete one (``Journal/recycle(_:as:base:)``) says so in its header's
/// flags (``recycledFlag``): past its records lie that segment's, numbered below its base,
/// and a zero length is written right after each batch that ends among them, before the
/// batch itself; there a zero length is the end whatever follows, unless records numbered
/// after the last good one lie beyond it (damage, as any bad record is).
enum SegmentFormat {
    static let magic: [UInt8] = Array("ASJOURNL".utf8)
    static let version: UInt32 = 1
    static let headerSize = 32
    static let recordHeaderSize = 8
    /// LSN and owner, inside the checksummed part.
    static let recordFixedSize = 16
    /// Bytes a record costs beyond its payload.
    static let recordOverhead = recordHeaderSize + recordFixedSize
    static let suffix = ".journal"
    /// A segment set aside after replay found it damaged: kept for inspection, never read again.
    static let damagedSuffix = ".damaged"

    /// `00000000000000012345.journal`.
    static func name(base: LSN) -> String {
        let digits = String(base.rawValue)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + suffix
    }

    /// The highest base LSN a segment may have: 2^62, which a journal appending a million
    /// records a second reaches after 146,000 years. Above it, the LSNs of a segment's
    /// records (consecutive from its base) and the next segment's base could pass
    /// `UInt64.max`; a file named so is not a segment, and replay refuses to start a
    /// journal whose next segment would be numbered above it (`EOVERFLOW`).
    static let maximumBase = LSN(1 << 62)

    /// The base LSN a segment file name stands for, or `nil` for any other name.
    static func base(ofName name: String) -> LSN? {
        guard name.hasSuffix(suffix) else { return nil }
        let digits = name.utf8.dropLast(suffix.utf8.count)
        guard digits.count == 20, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let value = UInt64(Substring(digits)), value <= maximumBase.rawValue
        else { return nil }
        return LSN(value)
    }

    /// The name an obsolete segment is kept under until it is recycled; replay deletes
    /// leftovers.
    static func spareName(_ number: Int) -> String { ".spare-\(number)" + suffix }
    static let sparePrefix = ".spare-"

    /// The name a recovery segment is written under before it is renamed into place.
    static func temporaryName(base: LSN) -> String { "." + name(base: base) + ".tmp" }

    /// The header's flag of a recycled segment. (Builds before it read the word as reserved
    /// and ignore it.)
    static let recycledFlag: UInt32 = 1

    static func header(base: LSN, recycled: Bool = false) -> [UInt8] {
        var bytes = magic
        bytes.appendLittleEndian(version)
        bytes.appendLittleEndian(UInt32(headerSize))
        bytes.appendLittleEndian(base.rawValue)
        bytes.appendLittleEndian(recycled ? recycledFlag : 0)
        bytes.appendLittleEndian(CRC32C.checksum(of: bytes))
        return bytes
    }

    /// Checks the header at the start of `bytes` against the base LSN the file name gives.
    static func checkHeader(_ bytes: UnsafeRawBufferPointer, expectedBase: LSN) -> JournalProblem.HeaderDefect? {
        guard bytes.count >= headerSize else {
            return bytes.allSatisfy({ $0 == 0 }) && !bytes.isEmpty ? .zeros : .tooShort
        }
        let head = UnsafeRawBufferPointer(rebasing: bytes[0..<headerSize])
        if head.allSatisfy({ $0 == 0 }) { return .zeros }
        if !head[0..<8].elementsEqual(magic) { return .badMagic }
        let stored = head.loadLittleEndianUInt32(at: 28)
        if CRC32C.checksum(of: UnsafeRawBufferPointer(rebasing: head[0..<28])) != stored { return .checksumMismatch }
        let version = head.loadLittleEndianUInt32(at: 8)
        if version != Self.version || head.loadLittleEndianUInt32(at: 12) != UInt32(headerSize) {
            return .unsupportedVersion(version)
        }
        let base = LSN(head.loadLittleEndianUInt64(at: 16))
        if base != expectedBase { return .baseMismatch(base) }
        return nil
    }

    /// Whether a valid header (``checkHeader(_:expectedBase:)`` found nothing wrong) is a
    /// recycled segment's.
    static func isRecycled(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.loadLittleEndianUInt32(at: 24) & recycledFlag != 0
    }

    /// Appends one framed record to `buffer`, its payload appended by `encode` right after
    /// the record's header. Returns the payload's size.
    @inline(__always)
    static func appendRecord(to buffer: inout [UInt8], lsn: LSN, owner: UInt64, encode: (inout [UInt8]) -> Void)
        -> Int
    {
        let start = buffer.count
        // The header's fixed part in one append: length and CRC-32C filled in below.
        let header: (UInt64, UInt64, UInt64) = (0, lsn.rawValue.littleEndian, owner.littleEndian)
        withUnsafeBytes(of: header) { buffer.append(contentsOf: $0) }
        encode(&buffer)
        let size = buffer.count - start - recordOverhead
        buffer.withUnsafeMutableBytes { all in
            all.storeBytes(of: UInt32(recordFixedSize + size).littleEndian, toByteOffset: start, as: UInt32.self)
            let crc = recordChecksum(UnsafeRawBufferPointer(all), at: start, length: recordFixedSize + size)
            all.storeBytes(of: crc.littleEndian, toByteOffset: start + 4, as: UInt32.self)
        }
        return size
    }

    /// The checksum a record at `offset` should carry, for a body of `length` bytes.
    @inline(__always)
    static func recordChecksum(_ bytes: UnsafeRawBufferPointer, at offset: Int, length: Int) -> UInt32 {
        let bodyStart = offset + recordHeaderSize
        let body = UnsafeRawBufferPointer(rebasing: bytes[bodyStart..<bodyStart + length])
        return CRC32C.checksum(word: bytes.loadLittleEndianUInt32(at: offset), thenOf: body)
    }
}

extension [UInt8] {
    @inline(__always)
    mutating func appendLittleEndian<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }
}

extension UnsafeRawBufferPointer {
    @inline(__always)
    func loadLittleEndianUInt32(at offset: Int) -> UInt32 {
        UInt32(littleEndian: loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    @inline(__always)
    func loadLittleEndianUInt64(at offset: Int) -> UInt64 {
        UInt64(littleEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }
}
