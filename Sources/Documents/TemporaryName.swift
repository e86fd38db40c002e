import Posix

/// Names of the temporary entries ``DurableWriter`` creates beside a destination:
/// `.<name>.autosave-XXXXXX` for a file or directory being built, and
/// `.<name>.autosave-old-XXXXXX` for a package's previous tree while it is swapped out.
public enum TemporaryName {
    static let marker = ".autosave-"
    static let oldMarker = ".autosave-old-"
    static let suffixLength = 6
    static let maximumNameBytes = 255

    /// A fresh temporary name for `name` (shortened so the result fits in 255 bytes).
    static func make(for name: String, old: Bool = false) -> String {
        let marker = old ? oldMarker : marker
        let budget = maximumNameBytes - 1 - marker.utf8.count - suffixLength
        var base = name
        while base.utf8.count > budget { base.removeLast() }
        return "." + base + marker + CurrentProcess.randomAlphanumerics(suffixLength)
    }

    /// Whether `name` is one of the writer's temporary names.
    public static func isTemporary(_ name: String) -> Bool { parse(name) != nil }

    /// The destination name a temporary name was made for, and whether it holds an old tree.
    public static func parse(_ name: String) -> (target: String, isOld: Bool)? {
        let bytes = Array(name.utf8)
        guard bytes.first == UInt8(ascii: "."), bytes.count > 1 + marker.utf8.count + suffixLength else { return nil }
        let suffix = bytes[(bytes.count - suffixLength)...]
        guard suffix.allSatisfy({ isAlphanumeric($0) }) else { return nil }
        let head = bytes[..<(bytes.count - suffixLength)]
        for (candidate, isOld) in [(oldMarker, true), (marker, false)] {
            let m = Array(candidate.utf8)
            if head.count > 1 + m.count, Array(head.suffix(m.count)) == m {
                let target = head.dropFirst().dropLast(m.count)
                return (String(decoding: target, as: UTF8.self), isOld)
            }
        }
        return nil
    }

    /// Whether a temporary name may have been shortened, so its target is only a prefix.
    static func mayBeTruncated(_ name: String) -> Bool { name.utf8.count >= maximumNameBytes - 4 }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (byte >= 48 && byte <= 57) || (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122)
    }
}
