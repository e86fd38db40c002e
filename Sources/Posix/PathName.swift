/// Arithmetic on `/`-separated path strings: the last component, the parent, a name's
/// extension.
///
/// Foundation's `NSString` path methods trap on some inputs on Linux (on this
/// toolchain `deletingLastPathComponent` of any one-character name such as `"x"`, and
/// `lastPathComponent`/`pathExtension` of `"//é"`), and document paths come from
/// clients, so the daemon never hands a path to them. These work on the UTF-8 bytes:
/// `/` and `.` are ASCII and never part of a multi-byte character, so every split falls
/// on a character boundary.
public enum PathName {
    private static let slash = UInt8(ascii: "/")
    private static let dot = UInt8(ascii: ".")

    /// The components of `path`, split at its `/` bytes: `"a/b//c"` → `["a", "b", "c"]`
    /// (with `omittingEmpty: false`, `["a", "b", "", "c"]`). Split by bytes, not by
    /// `Character`: a `/` followed by a combining mark (`"/\u{301}"`) is one character to
    /// Swift, and `split(separator: "/")` would not split there, but the kernel does.
    public static func components(_ path: String, omittingEmpty: Bool = true) -> [String] {
        path.utf8.split(separator: slash, omittingEmptySubsequences: omittingEmpty).map { String(Substring($0)) }
    }

    /// Whether `path`'s bytes begin with `prefix`'s. Paths are compared by bytes, as the
    /// kernel compares names: Swift's `hasPrefix` and `==` compare characters, by
    /// canonical equivalence, so `"caf\u{E9}"` and `"cafe\u{301}"` (two different files)
    /// would be equal.
    public static func starts(_ path: String, with prefix: String) -> Bool {
        path.utf8.starts(with: prefix.utf8)
    }

    /// Whether `path` is `directory` or lies beneath it, by bytes (see ``starts(_:with:)``).
    public static func isWithin(_ path: String, _ directory: String) -> Bool {
        guard path.utf8.starts(with: directory.utf8) else { return false }
        let rest = path.utf8.dropFirst(directory.utf8.count)
        return rest.isEmpty || rest.first == slash
    }

    /// `path` made absolute against the working directory `cwd` (an absolute path is
    /// returned as it is), as Foundation's `URL(fileURLWithPath:)` makes a relative path
    /// absolute: `.` and empty components dropped, `..` taking away the component before
    /// it. A store root given relative (`./autosave-data`) is compared with the paths
    /// of the URLs made of it by bytes; both must be absolute the same way.
    public static func absolute(_ path: String, cwd: String) -> String {
        guard path.utf8.first != slash else { return path }
        var parts: [String] = []
        for component in components(cwd) + components(path) {
            switch component {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(component)
            }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// `path` without trailing slashes (`"/"` stays `"/"`).
    private static func trimmedEnd(_ path: Substring.UTF8View) -> Substring.UTF8View {
        var end = path.endIndex
        while end > path.startIndex, path[path.index(before: end)] == slash {
            end = path.index(before: end)
        }
        if end == path.startIndex, !path.isEmpty { return path[path.startIndex..<path.index(after: path.startIndex)] }
        return path[path.startIndex..<end]
    }

    /// The last component: `"a/b.txt"` → `"b.txt"`, `"a/b/"` → `"b"`, `"a"` → `"a"`,
    /// `"/"` → `"/"`, `""` → `""`.
    public static func lastComponent(_ path: String) -> String {
        // The usual case, a path without a trailing slash, on its bytes in place.
        let quick = path.utf8.withContiguousStorageIfAvailable { bytes -> String? in
            guard let end = bytes.last, end != slash else { return nil }
            guard let separator = bytes.lastIndex(of: slash) else { return path }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[(separator + 1)...]), as: UTF8.self)
        }
        if let quick, let quick { return quick }
        let trimmed = trimmedEnd(path[...].utf8)
        if trimmed.count == 1, trimmed.first == slash { return "/" }
        guard let separator = trimmed.lastIndex(of: slash) else { return String(Substring(trimmed)) }
        return String(Substring(trimmed[trimmed.index(after: separator)...]))
    }

    /// Everything before the last component, without trailing slashes: `"a/b/c"` →
    /// `"a/b"`, `"a"` → `""`, `"/a"` → `"/"`, `"/"` → `"/"`, `"a//b"` → `"a"`.
    public static func parent(_ path: String) -> String {
        let trimmed = trimmedEnd(path[...].utf8)
        if trimmed.count == 1, trimmed.first == slash { return "/" }
        guard let separator = trimmed.lastIndex(of: slash) else { return "" }
        let head = trimmed[trimmed.startIndex..<separator]
        if head.isEmpty { return "/" }
        return String(Substring(trimmedEnd(head)))
    }

    /// A file name split at its last dot: `"a.tar.gz"` → `("a.tar", "gz")`; a name with
    /// no dot, or whose only dot is its first character (`".profile"`), has no extension;
    /// `"a."` → `("a", "")`.
    public static func splitExtension(_ name: String) -> (base: String, extension: String) {
        let bytes = name.utf8
        guard let index = bytes.lastIndex(of: dot), index != bytes.startIndex else { return (name, "") }
        return (String(Substring(bytes[..<index])), String(Substring(bytes[bytes.index(after: index)...])))
    }

    /// The extension of the path's last component (`"notes/a.JSON"` → `"JSON"`), or `""`.
    public static func pathExtension(_ path: String) -> String {
        // The usual case, a path without a trailing slash, on its bytes in place: the bytes
        // after the last dot of the last component, unless that dot begins it.
        let quick = path.utf8.withContiguousStorageIfAvailable { bytes -> String? in
            guard let end = bytes.last, end != slash else { return nil }
            var index = bytes.count - 1
            while index >= 0, bytes[index] != slash, bytes[index] != dot { index -= 1 }
            guard index > 0, bytes[index] == dot, bytes[index - 1] != slash else { return "" }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[(index + 1)...]), as: UTF8.self)
        }
        if let quick, let quick { return quick }
        return splitExtension(lastComponent(path)).extension
    }

    /// `path` relative to `root` when it lies beneath it (`"."` for the root itself), by
    /// the strings' bytes alone (no Unicode equivalence: a file system compares names as
    /// bytes); `nil` otherwise. `root` may end with a slash. Every save asks, so it walks
    /// the bytes once, with no intermediate strings.
    public static func relative(_ path: String, to root: String) -> String? {
        let base = trimmedEnd(root[...].utf8)
        let bytes = path.utf8
        var index = bytes.startIndex
        for byte in base {
            guard index < bytes.endIndex, bytes[index] == byte else { return nil }
            index = bytes.index(after: index)
        }
        if index == bytes.endIndex { return "." }
        // Beneath the root: a slash follows it (the root "/" ends with its own).
        let rootIsSlash = base.count == 1 && base.first == slash
        if !rootIsSlash {
            guard bytes[index] == slash else { return nil }
            index = bytes.index(after: index)
        }
        guard index < bytes.endIndex else { return nil }
        return String(Substring(bytes[index...]))
    }

    /// Whether one of `path`'s components is `..`.
    public static func hasParentComponent(_ path: String) -> Bool {
        var dots = 0
        for byte in path.utf8 {
            if byte == slash {
                if dots == 2 { return true }
                dots = 0
            } else if byte == UInt8(ascii: "."), dots >= 0 {
                dots += 1
            } else {
                dots = -1
            }
        }
        return dots == 2
    }
}
