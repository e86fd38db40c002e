import CLinux

/// CRC-32C (Castagnoli) with the CPU's own instruction (SSE4.2's `crc32` on x86-64),
/// where there is one: the journal checksums every record with it.
public enum HardwareCRC32C {
    /// Whether this CPU has the instruction; without it ``checksum(of:continuing:)`` must not be called.
    public static let isAvailable = system_crc32c_available()

    /// The checksum of `bytes`, continuing `crc` (the checksum of what came before; 0 to start).
    public static func checksum(of bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress else { return crc }
        return system_crc32c(crc, base, bytes.count)
    }

    /// The checksum of `word`'s four bytes (little-endian, as stored) followed by `bytes`,
    /// in one call: `checksum(of: bytes, continuing: checksum(of: <word's bytes>))`.
    public static func checksum(word: UInt32, thenOf bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress else {
            return withUnsafeBytes(of: word.littleEndian) { checksum(of: $0) }
        }
        return system_crc32c_word_then(word, base, bytes.count)
    }
}
