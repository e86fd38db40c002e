import Posix

/// One ignore pattern, in gitignore's syntax, with where it came from.
///
/// A pattern without a slash (other than a trailing one) matches a name at any depth
/// below its base directory; a pattern with a slash is anchored at its base directory
/// (a leading slash only anchors). `*` and `?` match within one component, `[…]` a
/// character class (`[!…]` or `[^…]` negated, ranges with `-`, POSIX classes such as
/// `[[:digit:]]`; a class that is not closed, or names an unknown POSIX class, matches
/// nothing), `\` escapes the next character, and `**` as a whole component matches any
/// number of directories (`**/x`, `a/**`, `a/**/b`). One trailing `/` is taken off and
/// makes the pattern match only directories (`a//` keeps a slash at its end, so it
/// matches nothing); a leading `!` re-includes what an earlier pattern excluded.
public struct IgnorePattern: Sendable, Equatable, CustomStringConvertible {
    /// The pattern as written (after trimming).
    public let text: String
    /// Where it came from, for messages: `built-in default`, `Ignore=`, `notes/.autosavedignore line 3`.
    public let source: String
    /// The directory (relative to the root, `""` for the root) whose paths it applies to.
    public let base: String
    public let negated: Bool
    public let directoryOnly: Bool
    /// Matched against the path relative to `base`; otherwise against the last component.
    public let anchored: Bool
    /// The glob, leading `!`, leading `/` and trailing `/` removed.
    let glob: [UInt8]
    /// What every path it matches starts and ends with: the glob's bytes before its first
    /// and after its last `*`, `?`, `[`, `]`, `\` or `/` (a `/` because `**/` may match no
    /// directory at all). Checked before the glob, they turn most paths away at a glance.
    let literalPrefix: [UInt8]
    let literalSuffix: [UInt8]

    /// Parses one line; `nil` for a blank line or a comment.
    public init?(_ line: some StringProtocol, source: String, base: String = "") {
        var text = String(line)
        if text.hasSuffix("\r") { text.removeLast() }
        // Trailing spaces are dropped unless escaped with a backslash that is not itself
        // escaped (`a\ ` keeps its space, `a\\ ` does not), as git reads them.
        var bytes = Array(text.utf8)
        var trailingSpaces: Int?
        var index = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: " "):
                if trailingSpaces == nil { trailingSpaces = index }
            case UInt8(ascii: "\\"):
                // The escaped byte is taken as it is.
                index += 1
                trailingSpaces = nil
            default:
                trailingSpaces = nil
            }
            index += 1
        }
        if let trailingSpaces {
            bytes.removeSubrange(trailingSpaces...)
            text = String(decoding: bytes, as: UTF8.self)
        }
        guard !bytes.isEmpty, bytes[0] != UInt8(ascii: "#") else { return nil }
        var negated = false
        if bytes[0] == UInt8(ascii: "!") {
            negated = true
            bytes.removeFirst()
        } else if bytes.count >= 2, bytes[0] == UInt8(ascii: "\\"),
            bytes[1] == UInt8(ascii: "!") || bytes[1] == UInt8(ascii: "#")
        {
            bytes.removeFirst()
        }
        // One trailing slash, as git takes it: with `a//` the other stays, and the
        // pattern is anchored and matches nothing (no path ends with a slash).
        var directoryOnly = false
        if bytes.last == UInt8(ascii: "/") {
            directoryOnly = true
            bytes.removeLast()
        }
        var anchored = false
        if bytes.first == UInt8(ascii: "/") {
            anchored = true
            bytes.removeFirst()
        }
        guard !bytes.isEmpty, bytes != [UInt8(ascii: "/")] else { return nil }
        if bytes.contains(UInt8(ascii: "/")) { anchored = true }
        self.text = text
        self.source = source
        self.base = base
        self.negated = negated
        self.directoryOnly = directoryOnly
        self.anchored = anchored
        self.glob = bytes
        func isSpecial(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "*"), UInt8(ascii: "?"), UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: "\\"),
                UInt8(ascii: "/"):
                return true
            default: return false
            }
        }
        literalPrefix = Array(bytes.prefix { !isSpecial($0) })
        literalSuffix = Array(bytes.reversed().prefix { !isSpecial($0) }.reversed())
    }

    public var description: String { "'\(text)' (\(source))" }

    /// The patterns of an ignore file's text, one per line, `#` comments; `file` names it in
    /// sources. A byte-order mark at its start is skipped, as git skips it.
    public static func parse(_ text: String, file: String, base: String) -> [IgnorePattern] {
        var patterns: [IgnorePattern] = []
        var scalars = text.unicodeScalars[...]
        if scalars.first == "\u{FEFF}" { scalars = scalars.dropFirst() }
        // Split by scalars: "\r\n" is one Character, which a split by Character never cuts.
        for (index, line) in scalars.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if let pattern = IgnorePattern(Substring(line), source: "\(file) line \(index + 1)", base: base) {
                patterns.append(pattern)
            }
        }
        return patterns
    }
}

/// A list of patterns in the form they are matched in: every pattern's base directory,
/// glob and literal ends laid out in one byte buffer, each pattern a few offsets and
/// flags. Matching a path against the list retains and copies nothing (iterating
/// ``IgnorePattern`` values copies each one's three strings and three arrays), which is
/// what a path costs on the way to becoming a document: every new document's path is
/// matched against every pattern in force.
struct CompiledPatterns: Sendable, Equatable {
    private struct Item: Equatable {
        var base: Range<Int32>
        var glob: Range<Int32>
        var prefix: Range<Int32>
        var suffix: Range<Int32>
        var directoryOnly: Bool
        var anchored: Bool
    }

    /// The patterns as given, in order: what a match answers with.
    private let patterns: [IgnorePattern]
    private var bytes: [UInt8] = []
    private var items: [Item] = []

    init(_ patterns: [IgnorePattern]) {
        self.patterns = patterns
        func add(_ part: some Collection<UInt8>) -> Range<Int32> {
            let start = Int32(bytes.count)
            bytes.append(contentsOf: part)
            return start..<Int32(bytes.count)
        }
        for pattern in patterns {
            items.append(
                Item(
                    base: add(pattern.base.utf8), glob: add(pattern.glob), prefix: add(pattern.literalPrefix),
                    suffix: add(pattern.literalSuffix), directoryOnly: pattern.directoryOnly,
                    anchored: pattern.anchored))
        }
    }

    /// The last pattern matching `path` (relative to the root; `isDirectory` tells what it
    /// names), if any.
    func lastMatch(_ path: UnsafeBufferPointer<UInt8>, isDirectory: Bool) -> IgnorePattern? {
        // The last component, found once: what every pattern without a slash is matched
        // against, wherever its base is (a path beneath a base ends in the same name).
        let name =
            path.lastIndex(of: UInt8(ascii: "/")).map { UnsafeBufferPointer(rebasing: path[($0 + 1)...]) } ?? path
        let index = bytes.withUnsafeBufferPointer { bytes in
            items.withUnsafeBufferPointer { items -> Int? in
                var index = items.count
                while index > 0 {
                    index -= 1
                    if Self.matches(items[index], bytes, path, name: name, isDirectory: isDirectory) { return index }
                }
                return nil
            }
        }
        return index.map { patterns[$0] }
    }

    @inline(__always)
    private static func matches(
        _ item: Item, _ bytes: UnsafeBufferPointer<UInt8>, _ path: UnsafeBufferPointer<UInt8>,
        name: UnsafeBufferPointer<UInt8>, isDirectory: Bool
    ) -> Bool {
        func part(_ range: Range<Int32>) -> UnsafeBufferPointer<UInt8> {
            UnsafeBufferPointer(rebasing: bytes[Int(range.lowerBound)..<Int(range.upperBound)])
        }
        if item.directoryOnly && !isDirectory { return false }
        var subject = path
        if !item.base.isEmpty {
            // Only paths strictly beneath the base directory.
            let base = part(item.base)
            guard path.count > base.count + 1, path[base.count] == UInt8(ascii: "/"),
                UnsafeBufferPointer(rebasing: path[..<base.count]).elementsEqual(base)
            else { return false }
            subject = UnsafeBufferPointer(rebasing: path[(base.count + 1)...])
        }
        if !item.anchored { subject = name }
        let prefix = part(item.prefix)
        let suffix = part(item.suffix)
        guard subject.count >= prefix.count, subject.count >= suffix.count,
            UnsafeBufferPointer(rebasing: subject[..<prefix.count]).elementsEqual(prefix),
            UnsafeBufferPointer(rebasing: subject[(subject.count - suffix.count)...]).elementsEqual(suffix)
        else { return false }
        return Wildmatch.match(part(item.glob), subject) == .match
    }
}

/// gitignore's glob matching (git's `wildmatch` with `WM_PATHNAME`, step for step): `*`,
/// `?` and `[…]` never match a `/`; `**` as a whole component matches across them. The
/// two abort results cut the search short where no later position can match, which keeps
/// a pattern with many stars linear in practice instead of exponential.
enum Wildmatch {
    enum Result { case match, noMatch, abortAll, abortToDoubleStar }

    static func match(_ pattern: UnsafeBufferPointer<UInt8>, _ text: UnsafeBufferPointer<UInt8>) -> Result {
        match(pattern, 0, text, 0)
    }

    private static let slash = UInt8(ascii: "/")
    private static let star = UInt8(ascii: "*")
    private static let backslash = UInt8(ascii: "\\")

    private static func match(
        _ p: UnsafeBufferPointer<UInt8>, _ pStart: Int, _ t: UnsafeBufferPointer<UInt8>, _ tStart: Int
    ) -> Result {
        var pi = pStart
        var ti = tStart
        while pi < p.count {
            let pc = p[pi]
            if ti >= t.count && pc != star { return .abortAll }
            switch pc {
            case backslash:
                pi += 1
                guard pi < p.count, p[pi] == t[ti] else { return .noMatch }
            case UInt8(ascii: "?"):
                if t[ti] == slash { return .noMatch }
            case star:
                let starStart = pi
                pi += 1
                var matchSlash = false
                if pi < p.count, p[pi] == star {
                    while pi < p.count, p[pi] == star { pi += 1 }
                    // `**` between slashes (or the pattern's ends) crosses them; `**\/` too.
                    let before = starStart == pStart || p[starStart - 1] == slash
                    let after =
                        pi == p.count || p[pi] == slash
                        || (p[pi] == backslash && pi + 1 < p.count && p[pi + 1] == slash)
                    if before && after {
                        // `**/` also matches no directory at all.
                        if pi < p.count, p[pi] == slash, match(p, pi + 1, t, ti) == .match { return .match }
                        matchSlash = true
                    }
                }
                if pi == p.count {
                    // A trailing star: the rest matches, unless a plain star meets a slash.
                    if !matchSlash, t[ti...].contains(slash) { return .noMatch }
                    return .match
                }
                if !matchSlash, p[pi] == slash {
                    // `*/`: skip to the next slash of the text, which the slash matches.
                    guard let next = t[ti...].firstIndex(of: slash) else { return .noMatch }
                    ti = next
                    continue
                }
                while ti < t.count {
                    if !isGlobSpecial(p[pi]) {
                        // A literal next: what comes before it belongs to the star.
                        let literal = p[pi]
                        while ti < t.count, matchSlash || t[ti] != slash, t[ti] != literal { ti += 1 }
                        if ti == t.count || t[ti] != literal { return .noMatch }
                    }
                    let result = match(p, pi, t, ti)
                    if result != .noMatch {
                        if !matchSlash || result != .abortToDoubleStar { return result }
                    } else if !matchSlash && t[ti] == slash {
                        return .abortToDoubleStar
                    }
                    ti += 1
                }
                return .abortAll
            case UInt8(ascii: "["):
                // A class that is not closed, or names an unknown POSIX class, matches nothing.
                guard let (matched, close) = matchClass(p, pi, t[ti]) else { return .abortAll }
                if !matched || t[ti] == slash { return .noMatch }
                pi = close
            default:
                if t[ti] != pc { return .noMatch }
            }
            pi += 1
            ti += 1
        }
        return ti == t.count ? .match : .noMatch
    }

    @inline(__always)
    private static func isGlobSpecial(_ byte: UInt8) -> Bool {
        byte == star || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "[") || byte == backslash
    }

    /// Matches `byte` against the class starting at `p[start]` (`[`); returns whether it
    /// matched and the index of the closing `]`, or `nil` for a class that is not closed or
    /// names an unknown POSIX class. Read as git reads it: a `]` first (after `!` or `^`)
    /// is a member; each member is compared as it is read, so the low end of a range is a
    /// member on its own (`[b-a]` matches `b`); a `-` right after a range or a POSIX class
    /// is a member, as is one before the `]`; `[:` without a `:]` before the next `]` is a
    /// member `[`.
    private static func matchClass(
        _ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ byte: UInt8
    ) -> (Bool, Int)? {
        let close = UInt8(ascii: "]")
        var i = start + 1
        guard i < p.count else { return nil }
        let negated = p[i] == UInt8(ascii: "!") || p[i] == UInt8(ascii: "^")
        if negated {
            i += 1
            guard i < p.count else { return nil }
        }
        var matched = false
        // The member just read, which a following `-` makes a range's low end.
        var previous: UInt8?
        while true {
            var c = p[i]
            if c == backslash {
                i += 1
                guard i < p.count else { return nil }
                c = p[i]
                if byte == c { matched = true }
                previous = c
            } else if c == UInt8(ascii: "-"), let low = previous, i + 1 < p.count, p[i + 1] != close {
                i += 1
                var high = p[i]
                if high == backslash {
                    i += 1
                    guard i < p.count else { return nil }
                    high = p[i]
                }
                if byte >= low && byte <= high { matched = true }
                previous = nil
            } else if c == UInt8(ascii: "["), i + 1 < p.count, p[i + 1] == UInt8(ascii: ":") {
                let name = i + 2
                guard let end = p[name...].firstIndex(of: close) else { return nil }
                if end > name, p[end - 1] == UInt8(ascii: ":") {
                    guard let member = posixClass(UnsafeBufferPointer(rebasing: p[name..<(end - 1)]), byte) else {
                        return nil
                    }
                    if member { matched = true }
                    previous = nil
                    i = end
                } else {
                    // No `[:name:]`: a `[`, and the class goes on after it.
                    if byte == c { matched = true }
                    previous = c
                }
            } else {
                if byte == c { matched = true }
                previous = c
            }
            i += 1
            guard i < p.count else { return nil }
            if p[i] == close { return (matched != negated, i) }
        }
    }

    /// Whether `byte` is in the POSIX class `name` (ASCII only, as git's own ctype has
    /// it: `space` is tab, newline, carriage return and space), `nil` for an unknown name.
    private static func posixClass(_ name: UnsafeBufferPointer<UInt8>, _ byte: UInt8) -> Bool? {
        let isDigit = byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
        let isUpper = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")
        let isLower = byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")
        let isGraph = byte > 0x20 && byte < 0x7F
        func named(_ literal: StaticString) -> Bool {
            literal.withUTF8Buffer { name.elementsEqual($0) }
        }
        if named("alnum") { return isDigit || isUpper || isLower }
        if named("alpha") { return isUpper || isLower }
        if named("blank") { return byte == 0x20 || byte == 0x09 }
        if named("cntrl") { return byte < 0x20 || byte == 0x7F }
        if named("digit") { return isDigit }
        if named("graph") { return isGraph }
        if named("lower") { return isLower }
        if named("print") { return isGraph || byte == 0x20 }
        if named("punct") { return isGraph && !isDigit && !isUpper && !isLower }
        if named("space") { return byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }
        if named("upper") { return isUpper }
        if named("xdigit") {
            return isDigit || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
        }
        return nil
    }
}

/// Which paths under the root are not documents: the built-in defaults, `[Store]
/// Ignore=`, and the ignore files (`IgnoreFile=`) in the root and the directories below
/// it. Later patterns win over earlier ones (an ignore file deeper in the tree over one
/// above it, over `Ignore=`, over the defaults), and a path inside an ignored directory
/// is ignored whatever comes later, as in git.
public struct IgnoreRules: Sendable, Equatable {
    /// Version control, editors' swap, lock and backup files, desktop litter.
    public static let defaults = [
        ".git", ".hg", ".svn", ".bzr", "_darcs", ".jj", "CVS",
        ".*.swp", ".*.swo", ".*.swx", "4913", "*~", "\\#*#", ".#*", ".*.kate-swp", ".goutputstream-*",
        "*___jb_tmp___", "*___jb_old___",
        ".DS_Store", "Thumbs.db", "desktop.ini",
    ]

    /// The defaults (when on) and `Ignore=`.
    public private(set) var base: [IgnorePattern]
    /// The name of the ignore files, or `nil` when they are not read.
    public let fileName: String?
    /// The patterns of each ignore file read, by its directory (relative to the root):
    /// by the directory's bytes, as the file system names it (two directories whose names
    /// differ only in Unicode normalization have an ignore file each).
    public private(set) var files: [PathKey: [IgnorePattern]] = [:]
    /// `base` and `files` as they are matched (kept with them).
    private var compiledBase = CompiledPatterns([])
    private var compiledFiles: [PathKey: CompiledPatterns] = [:]
    /// How many components the deepest directory with an ignore file has (`""`: 0): no
    /// directory below that depth is looked up. Without the bound, each prefix of a path
    /// looked up every directory above it, each by a string made for it, most finding
    /// nothing: quadratic in the path's components (a FuzzIgnore input took 24 s of CPU,
    /// 0.6 s with the bound, most of that the fuzzer's own reference matcher).
    private var fileDepth = 0

    public init(configuration: Configuration) {
        var base: [IgnorePattern] = []
        if configuration.ignoreDefaults {
            base += Self.defaults.compactMap {
                IgnorePattern($0, source: "built-in default; IgnoreDefaults=no turns the defaults off")
            }
        }
        base += configuration.ignore.compactMap { IgnorePattern($0, source: "Ignore= in the configuration") }
        self.base = base
        compiledBase = CompiledPatterns(base)
        fileName = configuration.ignoreFile.isEmpty ? nil : configuration.ignoreFile
    }

    /// Every pattern in force, in the order they are applied.
    public var all: [IgnorePattern] {
        base
            + fileDirectories.flatMap { files[PathKey($0)]! }
    }

    /// The directories with an ignore file, in the order their patterns apply (the
    /// shallowest first).
    public var fileDirectories: [String] {
        files.keys.map(\.path).sorted {
            $0.utf8.count < $1.utf8.count
                || ($0.utf8.count == $1.utf8.count && $0.utf8.lexicographicallyPrecedes($1.utf8))
        }
    }

    /// Sets the patterns of the ignore file in `directory` (`[]` when it has none); `true` if they changed.
    @discardableResult
    public mutating func setFile(_ directory: String, _ patterns: [IgnorePattern]) -> Bool {
        let key = PathKey(directory)
        let changed = patterns != (files[key] ?? [])
        if patterns.isEmpty {
            files[key] = nil
            compiledFiles[key] = nil
            fileDepth = Self.depth(of: files.keys.lazy.map(\.path))
        } else if changed {
            files[key] = patterns
            compiledFiles[key] = CompiledPatterns(patterns)
            fileDepth = max(fileDepth, Self.depth(of: [directory]))
        }
        return changed
    }

    /// Reads the ignore file in the root-relative `directory` of `root`; `[]` when there is none.
    public func readFile(in directory: String, root: String) -> [IgnorePattern] {
        guard let fileName else { return [] }
        let relative = directory.isEmpty ? fileName : directory + "/" + fileName
        guard let fd = try? FileDescriptor.open(root + "/" + relative, options: [.noFollow]) else { return [] }
        guard let bytes = try? fd.closeAfter({ () throws(Errno) -> [UInt8] in try fd.readToEnd() }) else { return [] }
        return IgnorePattern.parse(String(decoding: bytes, as: UTF8.self), file: relative, base: directory)
    }

    /// Forgets the patterns of the ignore files at or under the root-relative `directory`
    /// (it is gone); returns whether there were any.
    @discardableResult
    public mutating func forgetFiles(atOrUnder directory: String) -> Bool {
        let prefix = directory + "/"
        let gone = files.keys.filter { $0 == PathKey(directory) || PathName.starts($0.path, with: prefix) }
        for key in gone { setFile(key.path, []) }
        return !gone.isEmpty
    }

    /// Forgets every ignore file's patterns (before they are read again).
    public mutating func forgetFiles() {
        files = [:]
        compiledFiles = [:]
        fileDepth = 0
    }

    /// Reads every ignore file under `root`, in the root and in each directory below it
    /// that is not itself ignored nor a package document of `registry` (links are not
    /// followed; a package's directory holds members, not rules); files no longer there
    /// are forgotten. (At start-up and on a rescan that opens new files the store reads
    /// them during its own scan.)
    public mutating func readFiles(root: String, registry: DocumentTypeRegistry) {
        forgetFiles()
        readFiles(under: "", root: root, registry: registry)
    }

    /// Forgets the ignore files of every directory but those in `kept` (after a scan that
    /// read the ignore file of each directory it entered: the others are gone, ignored, or
    /// a package's).
    public mutating func forgetFiles(except kept: Set<PathKey>) {
        for directory in files.keys where !kept.contains(directory) { setFile(directory.path, []) }
    }

    /// Reads the ignore files in the root-relative `top` and in each directory below it
    /// that is not ignored nor a package document of `registry` (links are not followed),
    /// over what is known already; returns whether any patterns changed.
    @discardableResult
    public mutating func readFiles(under top: String, root: String, registry: DocumentTypeRegistry) -> Bool {
        guard fileName != nil else { return false }
        var changed = false
        var pending = [top]
        while let directory = pending.popLast() {
            changed = setFile(directory, readFile(in: directory, root: root)) || changed
            let full = directory.isEmpty ? root : root + "/" + directory
            guard
                let fd = try? FileDescriptor.open(
                    full, options: directory.isEmpty ? [.directory] : [.directory, .noFollow]),
                let entries = try? fd.closeAfter({ () throws(Errno) -> [DirectoryEntry] in try fd.directoryEntries() })
            else { continue }
            for entry in entries {
                let path = directory.isEmpty ? entry.name : directory + "/" + entry.name
                let kind =
                    entry.kind ?? (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + path))?.kind
                if kind == .directory, !registry.isPackage(entry.name), ignoring(path, isDirectory: true) == nil {
                    pending.append(path)
                }
            }
        }
        return changed
    }

    /// Whether `name` is an ignore file's name (ignore files are never documents).
    public func isIgnoreFile(_ name: some StringProtocol) -> Bool { fileName.map { $0 == name } ?? false }

    /// The pattern that makes `path` (relative to the root) not a document, or `nil` if it
    /// is one. `isDirectory` says what `path` itself names; its parents are directories.
    public func ignoring(_ path: String, isDirectory: Bool) -> IgnorePattern? {
        var path = path
        return path.withUTF8 { ignoring($0, isDirectory: isDirectory) }
    }

    /// ``ignoring(_:isDirectory:)`` of a path's UTF-8 bytes. With `directoriesChecked`
    /// the caller knows that no directory on the way is ignored: the path alone is matched.
    func ignoring(_ bytes: UnsafeBufferPointer<UInt8>, isDirectory: Bool, directoriesChecked: Bool = false)
        -> IgnorePattern?
    {
        var end = directoriesChecked ? (bytes.lastIndex(of: UInt8(ascii: "/")).map { $0 + 1 } ?? 0) : 0
        while end < bytes.count {
            let slash = bytes[end...].firstIndex(of: UInt8(ascii: "/")) ?? bytes.count
            let prefix = UnsafeBufferPointer(rebasing: bytes[..<slash])
            let last = slash == bytes.count
            if last, let fileName, bytes[end...].elementsEqual(fileName.utf8) {
                return IgnorePattern(fileName, source: "an ignore file (IgnoreFile=), which is never a document")
            }
            if let pattern = decision(prefix, isDirectory: last ? isDirectory : true) { return pattern }
            end = slash + 1
        }
        return nil
    }

    /// The last pattern matching `path` alone, if it excludes.
    private func decision(_ path: UnsafeBufferPointer<UInt8>, isDirectory: Bool) -> IgnorePattern? {
        var found = compiledBase.lastMatch(path, isDirectory: isDirectory)
        if !compiledFiles.isEmpty {
            // Ignore files apply from the shallowest directory to the deepest.
            func apply(_ directory: String) {
                if let match = compiledFiles[PathKey(directory)]?.lastMatch(path, isDirectory: isDirectory) {
                    found = match
                }
            }
            apply("")
            var index = 0
            var depth = 0
            while depth < fileDepth, let slash = path[index...].firstIndex(of: UInt8(ascii: "/")) {
                apply(String(decoding: UnsafeBufferPointer(rebasing: path[..<slash]), as: UTF8.self))
                index = slash + 1
                depth += 1
            }
        }
        guard let found, !found.negated else { return nil }
        return found
    }

    /// The most components among `directories` (relative to the root; `""` has none).
    private static func depth(of directories: some Sequence<String>) -> Int {
        directories.reduce(0) { deepest, directory in
            directory.isEmpty ? deepest : max(deepest, directory.utf8.count { $0 == UInt8(ascii: "/") } + 1)
        }
    }
}

/// The rules shared by the store and its watcher's thread.
final class SharedIgnoreRules: Sendable {
    private struct Shared {
        var rules: IgnoreRules
        /// The directory of the last path found not ignored: it and every directory above
        /// it are not ignored under `rules`, so the next path in it is matched alone.
        /// Forgotten when the rules are replaced.
        var goodDirectory: [UInt8] = []
    }

    private let shared: Lock<Shared>

    init(_ rules: IgnoreRules) { shared = Lock(Shared(rules: rules)) }

    var current: IgnoreRules { shared.withLock { $0.rules } }

    func replace(_ new: IgnoreRules) { shared.withLock { $0 = Shared(rules: new) } }

    func ignoring(_ path: String, isDirectory: Bool) -> IgnorePattern? {
        var path = path
        return path.withUTF8 { bytes in
            // Where the last component starts; a path in the root has no directory to remember.
            guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else {
                return shared.withLock { $0.rules.ignoring(bytes, isDirectory: isDirectory) }
            }
            let directory = UnsafeBufferPointer(rebasing: bytes[..<slash])
            return shared.withLock { shared in
                if directory.elementsEqual(shared.goodDirectory) {
                    return shared.rules.ignoring(bytes, isDirectory: isDirectory, directoriesChecked: true)
                }
                let found = shared.rules.ignoring(bytes, isDirectory: isDirectory)
                if found == nil { shared.goodDirectory = Array(directory) }
                return found
            }
        }
    }
}
