import Autosave
import FuzzSupport

// MARK: A reference, written from the documented syntax (IgnorePattern's doc comment, gitignore(5))

struct ReferencePattern {
    var text: [UInt8]
    var negated = false
    var directoryOnly = false
    var anchored = false
    var glob: [UInt8] = [] {
        didSet { compiled = tokens(glob) }
    }
    var compiled: [Token] = []
}

/// One line of an ignore file, as git reads it: trailing spaces go unless escaped by a
/// backslash (itself not escaped), `#` starts a comment, `!` negates, `\!` and `\#` are literal.
func referenceParse(_ line: [UInt8]) -> ReferencePattern? {
    var bytes = line
    if bytes.last == 13 { bytes.removeLast() }
    var lastSpace: Int?
    var index = 0
    while index < bytes.count {
        switch bytes[index] {
        case 0x20:
            if lastSpace == nil { lastSpace = index }
        case UInt8(ascii: "\\"):
            index += 1
            lastSpace = nil
        default:
            lastSpace = nil
        }
        index += 1
    }
    if let lastSpace { bytes.removeSubrange(lastSpace...) }
    var pattern = ReferencePattern(text: bytes)
    guard !bytes.isEmpty, bytes[0] != UInt8(ascii: "#") else { return nil }
    if bytes[0] == UInt8(ascii: "!") {
        pattern.negated = true
        bytes.removeFirst()
    } else if bytes.count >= 2, bytes[0] == UInt8(ascii: "\\"),
        bytes[1] == UInt8(ascii: "!") || bytes[1] == UInt8(ascii: "#")
    {
        bytes.removeFirst()
    }
    // One trailing slash: `a//` is `a/`, directories only, anchored by the slash that stays.
    if bytes.last == UInt8(ascii: "/") {
        pattern.directoryOnly = true
        bytes.removeLast()
    }
    if bytes.first == UInt8(ascii: "/") {
        pattern.anchored = true
        bytes.removeFirst()
    }
    guard !bytes.isEmpty, bytes != [UInt8(ascii: "/")] else { return nil }
    if bytes.contains(UInt8(ascii: "/")) { pattern.anchored = true }
    pattern.glob = bytes
    return pattern
}

/// A glob, tokenised.
enum Token: Equatable {
    case literal(UInt8)
    case never  // a trailing backslash, a class not closed or naming no POSIX class: matches nothing
    case any  // ?
    case set([ClosedRange<UInt8>], negated: Bool)
    case star  // any run without '/'
    case anything  // `**` after a slash (or at the start) before the end or `\/`: any run at all
    case directories  // `**/`: nothing, or any run that ends with '/'
}

/// The POSIX classes, ASCII only as in git (whose `space` has no vertical tab or form feed).
let posixClasses: [[UInt8]: [ClosedRange<UInt8>]] = [
    Array("alnum".utf8): [48...57, 65...90, 97...122],
    Array("alpha".utf8): [65...90, 97...122],
    Array("blank".utf8): [9...9, 32...32],
    Array("cntrl".utf8): [0...31, 127...127],
    Array("digit".utf8): [48...57],
    Array("graph".utf8): [33...126],
    Array("lower".utf8): [97...122],
    Array("print".utf8): [32...126],
    Array("punct".utf8): [33...47, 58...64, 91...96, 123...126],
    Array("space".utf8): [9...10, 13...13, 32...32],
    Array("upper".utf8): [65...90],
    Array("xdigit".utf8): [48...57, 65...70, 97...102],
]

/// The class starting at `p[start]` (`[`) and the index of its closing `]`, as git reads
/// one; `nil` if it is not closed or names an unknown POSIX class. A `]` first is a
/// member; every byte read alone is a member, a range's low end too (`[b-a]` has `b`); a
/// `-` right after a range or a POSIX class, or before the `]`, is a member; `[:` with no
/// `:]` before the next `]` is a member `[`.
func referenceClass(_ p: [UInt8], _ start: Int) -> (ranges: [ClosedRange<UInt8>], negated: Bool, end: Int)? {
    var k = start + 1
    var negated = false
    if k < p.count, p[k] == UInt8(ascii: "!") || p[k] == UInt8(ascii: "^") {
        negated = true
        k += 1
    }
    var ranges: [ClosedRange<UInt8>] = []
    var low: UInt8?  // the member just read alone, which a `-` makes a range's low end
    var first = true
    while k < p.count {
        let c = p[k]
        if c == UInt8(ascii: "]") && !first { return (ranges, negated, k) }
        first = false
        if c == UInt8(ascii: "\\") {
            guard k + 1 < p.count else { return nil }
            ranges.append(p[k + 1]...p[k + 1])
            low = p[k + 1]
            k += 2
        } else if c == UInt8(ascii: "-"), let from = low, k + 1 < p.count, p[k + 1] != UInt8(ascii: "]") {
            var to = p[k + 1]
            k += 2
            if to == UInt8(ascii: "\\") {
                guard k < p.count else { return nil }
                to = p[k]
                k += 1
            }
            if from <= to { ranges.append(from...to) }
            low = nil
        } else if c == UInt8(ascii: "["), k + 1 < p.count, p[k + 1] == UInt8(ascii: ":") {
            guard let close = p[(k + 2)...].firstIndex(of: UInt8(ascii: "]")) else { return nil }
            if close >= k + 3, p[close - 1] == UInt8(ascii: ":") {
                guard let members = posixClasses[Array(p[(k + 2)..<(close - 1)])] else { return nil }
                ranges += members
                low = nil
                k = close + 1
            } else {
                ranges.append(c...c)
                low = c
                k += 1
            }
        } else {
            ranges.append(c...c)
            low = c
            k += 1
        }
    }
    return nil
}

func tokens(_ p: [UInt8]) -> [Token] {
    var out: [Token] = []
    var i = 0
    while i < p.count {
        let c = p[i]
        switch c {
        case UInt8(ascii: "\\"):
            if i + 1 < p.count {
                out.append(.literal(p[i + 1]))
                i += 2
            } else {
                out.append(.never)
                i += 1
            }
        case UInt8(ascii: "?"):
            out.append(.any)
            i += 1
        case UInt8(ascii: "*"):
            var j = i
            while j < p.count, p[j] == UInt8(ascii: "*") { j += 1 }
            let double = j - i >= 2 && (i == 0 || p[i - 1] == UInt8(ascii: "/"))
            if double && j == p.count {
                out.append(.anything)
                i = j
            } else if double && p[j] == UInt8(ascii: "/") {
                out.append(.directories)
                i = j + 1
            } else if double && p[j] == UInt8(ascii: "\\") && j + 1 < p.count && p[j + 1] == UInt8(ascii: "/") {
                // `**\/`: any run, then the escaped slash (at least one slash: not `**/`).
                out.append(.anything)
                i = j
            } else {
                out.append(.star)
                i = j
            }
        case UInt8(ascii: "["):
            guard let (ranges, negated, end) = referenceClass(p, i) else {
                // Nothing can match past a class that is not closed or names no POSIX class.
                out.append(.never)
                return out
            }
            out.append(.set(ranges, negated: negated))
            i = end + 1
        default:
            out.append(.literal(c))
            i += 1
        }
    }
    return out
}

/// The memo of ``referenceMatch``, kept from one call to the next (only its first cells
/// are cleared for each match): a reference run thousands of times per input allocates nothing.
nonisolated(unsafe) var memoStorage = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 0)

/// Whether the tokens match all of `t`: plain recursion with a memo, no shortcuts.
func referenceMatch(_ tokens: [Token], _ t: UnsafeBufferPointer<UInt8>) -> Bool {
    let cells = (tokens.count + 1) * (t.count + 1)
    if memoStorage.count < cells {
        memoStorage.deallocate()
        memoStorage = .allocate(capacity: max(cells, 2 * memoStorage.count))
    }
    let memo = UnsafeMutableBufferPointer(rebasing: memoStorage[..<cells])
    memo.initialize(repeating: 0)  // 0 unknown, 1 no, 2 yes
    return tokens.withUnsafeBufferPointer { matchFrom(0, 0, $0, t, memo) }
}

private func matchFrom(
    _ ti: Int, _ si: Int, _ tokens: UnsafeBufferPointer<Token>, _ t: UnsafeBufferPointer<UInt8>,
    _ memo: UnsafeMutableBufferPointer<UInt8>
) -> Bool {
    func go(_ ti: Int, _ si: Int) -> Bool { matchFrom(ti, si, tokens, t, memo) }
    let key = ti * (t.count + 1) + si
    if memo[key] != 0 { return memo[key] == 2 }
    let result: Bool
    if ti == tokens.count {
        result = si == t.count
    } else {
        switch tokens[ti] {
        case .literal(let c): result = si < t.count && t[si] == c && go(ti + 1, si + 1)
        case .never: result = false
        case .any: result = si < t.count && t[si] != UInt8(ascii: "/") && go(ti + 1, si + 1)
        case .set(let ranges, let negated):
            result =
                si < t.count && t[si] != UInt8(ascii: "/")
                && (ranges.contains { $0.contains(t[si]) } != negated) && go(ti + 1, si + 1)
        case .star:
            var end = si
            var found = go(ti + 1, si)
            while !found, end < t.count, t[end] != UInt8(ascii: "/") {
                end += 1
                found = go(ti + 1, end)
            }
            result = found
        case .anything:
            var found = go(ti + 1, si)
            var end = si
            while !found, end < t.count {
                end += 1
                found = go(ti + 1, end)
            }
            result = found
        case .directories:
            var found = go(ti + 1, si)
            var end = si
            while !found, end < t.count {
                if t[end] == UInt8(ascii: "/") { found = go(ti + 1, end + 1) }
                end += 1
            }
            result = found
        }
    }
    memo[key] = result ? 2 : 1
    return result
}

/// Whether a pattern from a file in `base` (or the configuration, base "") matches `path`.
func referenceApplies(
    _ pattern: ReferencePattern, base: [UInt8], _ path: UnsafeBufferPointer<UInt8>, isDirectory: Bool
) -> Bool {
    if pattern.directoryOnly && !isDirectory { return false }
    var start = 0
    if !base.isEmpty {
        guard path.count > base.count + 1, path.starts(with: base), path[base.count] == UInt8(ascii: "/") else {
            return false
        }
        start = base.count + 1
    }
    if !pattern.anchored, let slash = path[start...].lastIndex(of: UInt8(ascii: "/")) {
        start = slash + 1
    }
    return referenceMatch(pattern.compiled, UnsafeBufferPointer(rebasing: path[start...]))
}

// MARK: The target

/// Paths that a glob is likely to match, so that matches are not left to chance.
func instances(_ glob: [UInt8]) -> [[UInt8]] {
    var plain: [UInt8] = []
    var deep: [UInt8] = []
    var i = 0
    while i < glob.count {
        let c = glob[i]
        switch c {
        case UInt8(ascii: "*"):
            plain += Array("x".utf8)
            deep += Array("x/y".utf8)
        case UInt8(ascii: "?"):
            plain.append(UInt8(ascii: "q"))
            deep.append(UInt8(ascii: "/"))
        case UInt8(ascii: "["):
            if i + 1 < glob.count {
                plain.append(glob[i + 1])
                deep.append(glob[i + 1])
            }
            if let close = glob[(i + 1)...].firstIndex(of: UInt8(ascii: "]")) { i = close }
        case UInt8(ascii: "\\"):
            if i + 1 < glob.count {
                plain.append(glob[i + 1])
                deep.append(glob[i + 1])
                i += 1
            }
        default:
            plain.append(c)
            deep.append(c)
        }
        i += 1
    }
    return [plain, deep, Array("d/".utf8) + plain, Array("d/e/".utf8) + plain]
}

/// The built-in patterns as the reference reads them (the same for every input).
let defaultReferences = IgnoreRules.defaults.compactMap { line in
    referenceParse(Array(line.utf8)).map { ($0, [UInt8]()) }
}

/// Input: `Ignore=` patterns (one per line), 0x00, the root's ignore file, 0x00, the
/// ignore file of directory `d`, 0x00, paths to decide (0x00-separated; a trailing `/`
/// names a directory).
func fuzzIgnore(_ input: [UInt8]) {
    let pieces = parts(input)
    var configuration = Configuration(environment: [:])
    configuration.ignoreDefaults = pieces.first?.first.map { $0 & 1 == 1 } ?? false
    configuration.ignoreFile = ".ignore"
    let configured = pieces[0].split(separator: 10, omittingEmptySubsequences: false).prefix(12).map {
        String(decoding: $0, as: UTF8.self)
    }
    configuration.ignore = configured.filter { IgnorePattern($0, source: "") != nil }
    var rules = IgnoreRules(configuration: configuration)
    var references: [(ReferencePattern, [UInt8])] = []

    // Each line, parsed by both.
    // A dozen lines each: enough for any interplay, few enough to stay fast.
    func firstLines(_ index: Int) -> [UInt8] {
        guard index < pieces.count else { return [] }
        return Array(
            pieces[index].split(separator: 10, omittingEmptySubsequences: false).prefix(12).joined(separator: [10]))
    }
    let files: [(text: [UInt8], base: String)] = [(firstLines(1), ""), (firstLines(2), "d")]
    let lineSets = [(firstLines(0), "")] + files.map { ($0.text, $0.base) }
    for (text, _) in lineSets {
        for line in text.split(separator: 10, omittingEmptySubsequences: false).map(Array.init) {
            let string = String(decoding: line, as: UTF8.self)
            let product = IgnorePattern(string, source: "")
            let reference = referenceParse(Array(string.utf8))
            guard let product, let reference else {
                check(
                    product == nil && reference == nil,
                    "one parser takes a line the other drops: \(show(line)): \(String(describing: product))")
                continue
            }
            check(
                product.text.utf8.elementsEqual(reference.text) && product.negated == reference.negated
                    && product.directoryOnly == reference.directoryOnly && product.anchored == reference.anchored,
                "the line \(show(line)) parses otherwise: \(product.text) negated \(product.negated) directoryOnly \(product.directoryOnly) anchored \(product.anchored); expected \(show(reference.text)) \(reference.negated) \(reference.directoryOnly) \(reference.anchored)"
            )
        }
    }
    for (text, base) in files where !text.isEmpty {
        rules.setFile(base, IgnorePattern.parse(String(decoding: text, as: UTF8.self), file: "f", base: base))
    }
    // The reference patterns, from the original lines, in the order the rules apply them.
    var sources: [([UInt8], [UInt8])] = []
    if configuration.ignoreDefaults { references = defaultReferences }
    sources += configuration.ignore.map { (Array($0.utf8), []) }
    for (text, base) in files where !text.isEmpty {
        var decoded = Array(String(decoding: text, as: UTF8.self).utf8)
        // A byte-order mark at the start of an ignore file is skipped, as git skips it.
        if decoded.starts(with: [0xEF, 0xBB, 0xBF]) { decoded.removeFirst(3) }
        sources += decoded.split(separator: 10, omittingEmptySubsequences: false).map { (Array($0), Array(base.utf8)) }
    }
    for (line, base) in sources {
        if let reference = referenceParse(line) { references.append((reference, base)) }
    }
    let all = rules.all
    check(all.count == references.count, "\(all.count) patterns in force, the reference has \(references.count)")

    var paths: [(path: String, isDirectory: Bool)] = []
    for piece in pieces.dropFirst(3) {
        var bytes = piece
        let isDirectory = bytes.last == UInt8(ascii: "/")
        bytes = Array(bytes.split(separator: UInt8(ascii: "/")).joined(separator: [UInt8(ascii: "/")]))
        if !bytes.isEmpty { paths.append((String(decoding: bytes, as: UTF8.self), isDirectory)) }
    }
    for (reference, _) in references.prefix(8) {
        for instance in instances(reference.glob) {
            let cleaned = Array(instance.split(separator: UInt8(ascii: "/")).joined(separator: [UInt8(ascii: "/")]))
            if !cleaned.isEmpty {
                paths.append((String(decoding: cleaned, as: UTF8.self), false))
                paths.append((String(decoding: cleaned, as: UTF8.self), true))
            }
        }
    }

    // The reference's decision for a path prefix and whether it is taken as a directory
    // (a trailing 1 or 0 on the key): the last pattern in force that matches, if any.
    var decisions: [[UInt8]: Int?] = [:]
    for (path, isDirectory) in paths.prefix(24) {
        let got = rules.ignoring(path, isDirectory: isDirectory)
        // The reference decision: each prefix of the path in turn, a directory unless it is the
        // path itself; the last pattern in force that matches decides; an excluded prefix ends it.
        let components = Array(path.utf8).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        var expected: (index: Int?, ignoreFile: Bool)?
        var prefix: [UInt8] = []
        for (k, component) in components.enumerated() {
            if k > 0 { prefix.append(UInt8(ascii: "/")) }
            prefix += component
            let last = k == components.count - 1
            if last, component.elementsEqual(".ignore".utf8) {
                expected = (nil, true)
                break
            }
            let asDirectory = last ? isDirectory : true
            // The paths share their leading directories: each (prefix, kind) is decided once.
            let decided: Int?
            if let known = decisions[prefix + [asDirectory ? 1 : 0]] {
                decided = known
            } else {
                var found: Int?
                prefix.withUnsafeBufferPointer { bytes in
                    for (index, (reference, base)) in references.enumerated()
                    where referenceApplies(reference, base: base, bytes, isDirectory: asDirectory) {
                        found = index
                    }
                }
                decisions[prefix + [asDirectory ? 1 : 0]] = .some(found)
                decided = found
            }
            if let decided, !references[decided].0.negated {
                expected = (decided, false)
                break
            }
        }
        switch (got, expected) {
        case (nil, nil): break
        case (let got?, let expected?):
            if expected.ignoreFile {
                check(got.text == ".ignore", "\(show(path.utf8)) is an ignore file, yet ignored by \(got)")
            } else {
                let want = all[expected.index!]
                check(
                    got.text.utf8.elementsEqual(want.text.utf8) && got.base == want.base && got.source == want.source,
                    "\(show(path.utf8)) (directory: \(isDirectory)) is ignored by \(got) (base '\(got.base)'), expected by \(want) (base '\(want.base)')"
                )
            }
        case (let got?, nil):
            fail(
                "\(show(path.utf8)) (directory: \(isDirectory)) is ignored by \(got) (base '\(got.base)'), expected kept\npatterns: \(all.map { show($0.text.utf8) })"
            )
        case (nil, let expected?):
            fail(
                "\(show(path.utf8)) (directory: \(isDirectory)) is kept, expected ignored by \(expected.index.map { all[$0].description } ?? "the ignore file rule")\npatterns: \(all.map { show($0.text.utf8) })"
            )
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzIgnore(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
