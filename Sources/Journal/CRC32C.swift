import Posix

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI, ext4 and
/// PostgreSQL's WAL use it: with the CPU's instruction where it has one
/// (``HardwareCRC32C``), else eight bytes at a time with slicing-by-8 tables
/// (``tableChecksum(of:continuing:)``, which the tests hold the instruction to).
///
/// `checksum(of: "123456789")` is `0xE306_9283`. Checksums chain:
/// `checksum(of: b, continuing: checksum(of: a))` equals the checksum of `a` followed by `b`.
public enum CRC32C {
    /// Eight tables of 256 entries; table `k` advances a byte by `k` further zero bytes.
    private static let tables: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
            t[i] = c
        }
        for k in 1..<8 {
            for i in 0..<256 {
                let previous = t[(k - 1) * 256 + i]
                t[k * 256 + i] = (previous >> 8) ^ t[Int(previous & 0xFF)]
            }
        }
        return t
    }()

    private static let hardware = HardwareCRC32C.isAvailable

    /// The checksum of `bytes`, continuing `crc` (the checksum of what came before; 0 to start).
    public static func checksum(of bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        if hardware { return HardwareCRC32C.checksum(of: bytes, continuing: crc) }
        return tableChecksum(of: bytes, continuing: crc)
    }

    /// The checksum of `word`'s four bytes (little-endian, as stored) followed by `bytes`:
    /// a record's length word and then its body, in one call.
    public static func checksum(word: UInt32, thenOf bytes: UnsafeRawBufferPointer) -> UInt32 {
        if hardware { return HardwareCRC32C.checksum(word: word, thenOf: bytes) }
        return tableChecksum(of: bytes, continuing: withUnsafeBytes(of: word.littleEndian) { tableChecksum(of: $0) })
    }

    /// ``checksum(of:continuing:)`` computed with the tables, whatever the CPU.
    public static func tableChecksum(of bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard var p = bytes.baseAddress else { return crc }
        var n = bytes.count
        var c = ~crc
        tables.withUnsafeBufferPointer { t in
            while n >= 8 {
                let one = UInt32(littleEndian: p.loadUnaligned(as: UInt32.self)) ^ c
                let two = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
                c =
                    t[7 * 256 + Int(one & 0xFF)] ^ t[6 * 256 + Int((one >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((one >> 16) & 0xFF)] ^ t[4 * 256 + Int(one >> 24)]
                    ^ t[3 * 256 + Int(two & 0xFF)] ^ t[2 * 256 + Int((two >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((two >> 16) & 0xFF)] ^ t[Int(two >> 24)]
                p += 8
                n -= 8
            }
            while n > 0 {
                c = (c >> 8) ^ t[Int((c ^ UInt32(p.load(as: UInt8.self))) & 0xFF)]
                p += 1
                n -= 1
            }
        }
        return ~c
    }

    /// The checksum of a byte collection (`[UInt8]`, `Data`, a string's `utf8`, …).
    public static func checksum<C: Collection<UInt8>>(of bytes: C, continuing crc: UInt32 = 0) -> UInt32 {
        if let result = bytes.withContiguousStorageIfAvailable({
            checksum(of: UnsafeRawBufferPointer($0), continuing: crc)
        }) {
            return result
        }
        return Array(bytes).withUnsafeBytes { checksum(of: $0, continuing: crc) }
    }
}
