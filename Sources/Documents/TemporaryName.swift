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

    /// Whether any component of `path` is one of the writer's temporary names (a file
    /// being written, or anything inside a package tree being built).
    public static func isInside(_ path: String) -> Bool {
        func check(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
            var start = 0
            for end in 0...bytes.count where end == bytes.count || bytes[end] == UInt8(ascii: "/") {
                if end - start > 1 + markerBytes.count + suffixLength,
                    matches(UnsafeBufferPointer(rebasing: bytes[start..<end])) != nil
                {
                    return true
                }
                start = end + 1
            }
            return false
        }
        if let found = path.utf8.withContiguousStorageIfAvailable(check) { return found }
        return Array(path.utf8).withUnsafeBufferPointer(check)
    }

    /// The destination name a temporary name was made for, and whether it holds an old tree.
    public static func parse(_ name: String) -> (target: String, isOld: Bool)? {
        // Every event of the watcher asks: straight over the name's bytes, no copies.
        if let parsed = name.utf8.withContiguousStorageIfAvailable({ parse(bytes: $0) }) { return parsed }
        return Array(name.utf8).withUnsafeBufferPointer { parse(bytes: $0) }
    }

    private static let markerBytes = Array(marker.utf8)
    private static let oldMarkerBytes = Array(oldMarker.utf8)

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) -> (target: String, isOld: Bool)? {
        matches(bytes).map {
            (String(decoding: UnsafeBufferPointer(rebasing: bytes[1..<$0.end]), as: UTF8.self), $0.isOld)
        }
    }

    /// Where the target ends in a temporary name, and whether the name holds an old tree.
    private static func matches(_ bytes: UnsafeBufferPointer<UInt8>) -> (end: Int, isOld: Bool)? {
        guard bytes.first == UInt8(ascii: "."), bytes.count > 1 + markerBytes.count + suffixLength else { return nil }
        let headCount = bytes.count - suffixLength
        for i in headCount..<bytes.count where !isAlphanumeric(bytes[i]) { return nil }
        for (candidate, isOld) in [(oldMarkerBytes, true), (markerBytes, false)] {
            guard headCount > 1 + candidate.count else { continue }
            let start = headCount - candidate.count
            if (0..<candidate.count).allSatisfy({ bytes[start + $0] == candidate[$0] }) { return (start, isOld) }
        }
        return nil
    }

    /// Whether a temporary name may have been shortened, so its target is only a prefix.
    static func mayBeTruncated(_ name: String) -> Bool { name.utf8.count >= maximumNameBytes - 4 }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (byte >= 48 && byte <= 57) || (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122)
    }
}
