import Testing

@testable import Autosave

/// Where gitignore's syntax has corners: POSIX classes, classes that never match,
/// extra trailing slashes, a byte-order mark, `**\/`, a reversed range.
@Suite("Ignore patterns as git reads them")
struct IgnoreGitPatternTests {
    /// Whether `path` is ignored under an ignore file in the root whose text is `file`.
    func ignored(file: String, _ path: String, directory: Bool) -> Bool {
        var configuration = Configuration(environment: [:])
        configuration.ignoreDefaults = false
        var rules = IgnoreRules(configuration: configuration)
        rules.setFile("", IgnorePattern.parse(file, file: ".autosavedignore", base: ""))
        return rules.ignoring(path, isDirectory: directory) != nil
    }

    // The expected answers are git's: each case was checked with git 2.39's
    // `git check-ignore` (and `git ls-files -o --exclude-standard`), the pattern in a
    // .gitignore and the path a file (or a directory, where it says so) in the work tree.
    @Test(
        "Character classes, unclosed classes, trailing slashes, a byte-order mark, **\\/ and ranges as in git",
        arguments: [
            // POSIX classes; a name git does not know makes the pattern match nothing.
            ("[[:digit:]]*.log", "1.log", false, true), ("[[:digit:]]*.log", "d].log", false, false),
            ("[[:bogus:]]", "b]", false, false),
            ("[[:alnum:]]", "7", false, true), ("[[:alpha:]]", "Q", false, true), ("[[:blank:]]", " ", false, true),
            ("[[:cntrl:]]", "\u{01}", false, true), ("[[:digit:]]", "5", false, true),
            ("[[:graph:]]", "~", false, true), ("[[:lower:]]", "q", false, true), ("[[:print:]]", " ", false, true),
            ("[[:punct:]]", "!", false, true), ("[[:space:]]", "\t", false, true), ("[[:upper:]]", "Z", false, true),
            ("[[:xdigit:]]", "f", false, true),
            // A class that is not closed matches nothing, not a literal `[`.
            ("a[b", "a[b", false, false), ("[]", "[]", false, false),
            // One trailing slash is taken off; the one left anchors the pattern and no path ends with it.
            ("foo//", "foo/x", false, false), ("foo//", "bar/foo/y", false, false), ("foo//", "foo", true, false),
            // A byte-order mark at the start of the file is skipped.
            ("\u{FEFF}*.log", "x.log", false, true),
            // `**` before an escaped slash still crosses directories.
            ("a/**\\/x", "a/b/c/x", false, true),
            // A reversed range matches its first byte, read as a member before the `-`.
            ("[b-a]", "b", false, true),
        ] as [(String, String, Bool, Bool)])
    func asGit(_ file: String, _ path: String, _ directory: Bool, _ expected: Bool) {
        #expect(ignored(file: file, path, directory: directory) == expected, "\(file.debugDescription) on \(path)")
    }
}
