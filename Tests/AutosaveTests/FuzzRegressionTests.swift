import Control
import Documents
import Foundation
import TestSupport
import Testing

@testable import Autosave

/// Inputs the fuzz targets in Fuzz/ found (each is also a seed in Fuzz/Corpus/), with
/// what the product must make of them.
@Suite("Fuzz finds: JSON merge patch, pointers, configuration and ignore files")
struct FuzzRegressionTests {
    let directory = TemporaryDirectory("fuzz-finds")

    func json(_ text: String) throws -> JSONValue { try JSONValue(parsing: text) }

    @Test("A merge patch changes the member a reader sees when a name is repeated (FuzzMergePatch)")
    func repeatedNamesInTheTarget() throws {
        // As found: the patch went into the first "b", while subscripts and pointers read the last.
        let found = try json(#"{"a":1,"b":0,"b":{"cBoolInt":[0,2]},"b":{"c":[1E2]}}"#)
            .merging(patch: try json(#"{"b":{"Boolc":null,"d":"x"},"e":null}"#))
        #expect(found.serialized(pretty: false) == #"{"a":1,"b":{"c":[1E2],"d":"x"}}"#)
        #expect(try found.value(at: "/b/d") == "x")

        let removed = try json(#"{"a":1,"a":2}"#).merging(patch: try json(#"{"a":null}"#))
        #expect(removed["a"] == nil)
        #expect(removed.serialized(pretty: false) == "{}")
    }

    @Test("Only the last member of a repeated name in the patch counts (FuzzMergePatch)")
    func repeatedNamesInThePatch() throws {
        let found = try json(#"{"b":{"c":[1,2]}}"#).merging(
            patch: try json(#"{"b":{"[":null,"d":"x"},"b":{"c":[1,2]}}"#))
        #expect(found.serialized(pretty: false) == #"{"b":{"c":[1,2]}}"#)
        let other = try json(#"{"a":0,"b":{"%c":[0,2]}}"#)
            .merging(patch: try json(#"{"\"a":0,"a":1,"b":0,"b":{"c":[0,2]}}"#))
        #expect(other.serialized(pretty: false) == #"{"a":1,"b":{"%c":[0,2],"c":[0,2]},"\"a":0}"#)
    }

    @Test("Member names are compared by their scalars, not by canonical equivalence")
    func namesByScalars() throws {
        // "é" precomposed and "e" + U+0301 are equal as Swift Strings, distinct JSON names.
        let merged = try json(#"{"\u00e9":1}"#).merging(patch: try json(#"{"e\u0301":2}"#))
        guard case .object(let members) = merged else {
            Issue.record("not an object")
            return
        }
        #expect(members.count == 2)
        #expect(merged["\u{E9}"] == .number("1"))
        #expect(merged["e\u{301}"] == .number("2"))
    }

    @Test("A pointer's tokens are split at every '/', even one followed by a combining mark")
    func pointerScalars() throws {
        let value = try json(#"{"a":{"\u0301b":1},"~\u0301":2}"#)
        #expect(try value.value(at: "/a/\u{301}b") == .number("1"))
        // '~' followed by anything but 0 or 1 is not a valid pointer, whatever follows it.
        #expect(throws: JSONValue.PointerError.self) { try value.value(at: "/~\u{301}") }
    }

    @Test("A configuration file with CRLF line ends reads as with LF (FuzzConfig)")
    func configurationCRLF() throws {
        let path = directory.sub("autosaved.conf")
        let text = "[Store]\nRoot=/srv/x\nIgnore=*.tmp build/\n[Autosave]\nQuietPeriod=500ms\n"
        try Disk.write(text.replacingOccurrences(of: "\n", with: "\r\n"), to: path)
        try FileManager.default.createDirectory(atPath: path + ".d", withIntermediateDirectories: false)
        try Disk.write("[Watch]\r\nMode=poll\r\nPollInterval=1s\r\n", to: path + ".d/10-part.conf")
        let configuration = try Configuration.load(path: path, required: true, environment: [:])
        #expect(configuration.root == "/srv/x")
        #expect(configuration.ignore == ["*.tmp", "build/"])
        #expect(configuration.quietPeriod == .milliseconds(500))
        #expect(configuration.watchMode == .poll && configuration.pollInterval == .seconds(1))

        // A problem is still reported at its line.
        try Disk.write("[Store]\r\n\r\nNope=1\r\n", to: path)
        do {
            _ = try Configuration.load(path: path, required: true, environment: [:])
            Issue.record("an unknown key was accepted")
        } catch {
            #expect(error.errors.map(\.line) == [3])
        }
    }

    @Test("A value starting with a combining mark: '=' is found by its scalar, not as a Character (FuzzConfig)")
    func combiningMarkAfterEquals() throws {
        let path = directory.sub("combining.conf")
        // As FuzzConfig found it: the mark after a carriage return, which the value's
        // trimming removes; rendered as Key=value, '=' and the mark make one Character.
        for text in ["[Store]\nPackageExtensions=\r\u{59D}osave]\n", "[Store]\nPackageExtensions=\u{59D}osave]\n"] {
            try Disk.write(text, to: path)
            let configuration = try Configuration.load(path: path, required: true, environment: [:])
            #expect(configuration.packageExtensions == ["\u{59D}osave]"])
        }
    }

    @Test("A list splits at any whitespace (a carriage return, a tab) and reads back as rendered (FuzzConfig)")
    func listWordsSplitAtWhitespace() throws {
        let path = directory.sub("lists.conf")
        // As FuzzConfig found it: the carriage return stayed inside the word, and its
        // rendering (PackageExtensions=\r…) read back without it.
        try Disk.write("[Store]\n[Store]\nPackageExtensions=,\r\u{59D}osave]", to: path)
        var configuration = try Configuration.load(path: path, required: true, environment: [:])
        #expect(configuration.packageExtensions == ["\u{59D}osave]"])
        try Disk.write(
            "[Store]\nPackageExtensions=a\tb,\u{301}c\nIgnore=x\ty \r*.z\n"
                + "[Control]\nExportDirectories=/e\t/f\n", to: path)
        configuration = try Configuration.load(path: path, required: true, environment: [:])
        // A comma followed by a combining mark is one Character, but still a separator.
        #expect(configuration.packageExtensions == ["a", "b", "\u{301}c"])
        #expect(configuration.ignore == ["x", "y", "*.z"])
        #expect(configuration.exportDirectories == ["/e", "/f"])
        let rendered = directory.sub("rendered.conf")
        try Disk.write(configuration.rendered, to: rendered)
        var again = try Configuration.load(path: rendered, required: true, environment: [:])
        again.sources = configuration.sources
        #expect(again == configuration)
    }

    @Test("An ignore file with CRLF line ends has one pattern per line (FuzzIgnore)")
    func ignoreFileCRLF() {
        let patterns = IgnorePattern.parse("*.tmp\r\nkeep\r\n!*.keep.tmp\r\n", file: ".autosavedignore", base: "")
        #expect(patterns.map(\.text) == ["*.tmp", "keep", "!*.keep.tmp"])
        var configuration = Configuration(environment: [:])
        configuration.ignoreDefaults = false
        var rules = IgnoreRules(configuration: configuration)
        rules.setFile("", patterns)
        #expect(rules.ignoring("a.tmp", isDirectory: false) != nil)
        #expect(rules.ignoring("keep", isDirectory: false) != nil)
        #expect(rules.ignoring("a.keep.tmp", isDirectory: false) == nil)
    }

    @Test("Time spans below a millisecond are rendered so that they read back the same (FuzzConfig)")
    func subMillisecondSpans() throws {
        let path = directory.sub("spans.conf")
        // As found: RetryInterval=250us was rendered as 0ms.
        try Disk.write(
            "[Autosave]\nQuietPeriod=1.5s\nMaxDelay=2min 3s 40ms\nRetryInterval=250us\nMaxRetryInterval=1d\n", to: path)
        let configuration = try Configuration.load(path: path, required: true, environment: [:])
        #expect(configuration.retryInterval == .microseconds(250))
        #expect(configuration.rendered.contains("RetryInterval=250us\n"))
        try Disk.write(configuration.rendered, to: path)
        var again = try Configuration.load(path: path, required: true, environment: [:])
        again.sources = configuration.sources
        #expect(again == configuration)
        #expect(TimeSpan.format(.nanoseconds(1500)) == "1500ns")
        #expect(try TimeSpan.parse("1500ns") == .nanoseconds(1500))
    }

    @Test(
        "Spans and sizes too large for their types are refused, not trapped on",
        arguments: [
            "[Autosave]\nQuietPeriod=10000000000\n", "[Autosave]\nMaxDelay=\(String(repeating: "9", count: 400))d\n",
            "[Control]\nMaxRequestSize=9999999999999999G\n",
        ])
    func tooLarge(text: String) throws {
        let path = directory.sub("large.conf")
        try Disk.write(text, to: path)
        #expect(throws: ConfigurationErrors.self) {
            _ = try Configuration.load(path: path, required: true, environment: [:])
        }
    }

    @Test("A trailing space after an escaped backslash is dropped, as git drops it (FuzzIgnore)")
    func escapedBackslashBeforeSpace() throws {
        // As found: the line `\\  ` kept a space, as if the second backslash escaped it.
        let found = try #require(IgnorePattern("\\\\  ", source: ""))
        #expect(found.text == "\\\\")
        var configuration = Configuration(environment: [:])
        configuration.ignoreDefaults = false
        configuration.ignore = ["\\\\  "]
        let rules = IgnoreRules(configuration: configuration)
        #expect(rules.ignoring("\\", isDirectory: false) != nil)
        #expect(rules.ignoring("\\ ", isDirectory: false) == nil)
        // An escaped space stays, and so do the spaces before it.
        #expect(IgnorePattern("a \\  ", source: "")?.text == "a \\ ")
        #expect(IgnorePattern("a\\\\\\  ", source: "")?.text == "a\\\\\\ ")
    }

    @Test(
        "A value ending in a carriage return reads back the same once rendered (FuzzConfig)",
        arguments: [
            "[Store]\nIgnore=*.tmp\r\r\n", "[Store]\r\nRoot=/srv/x\r\r\r\n", "[Store]\nIgnore=a\r \r\n",
            "[Store]\nRoot=/srv/\t\tu\t\tx\nIgnore=*.tme\u{0E}\u{0E}n an/dev wit\r\r\r\r\n",
        ])
    func valueEndingInCarriageReturn(text: String) throws {
        // As found: only the CR of the line's CRLF was dropped, so the value kept the others;
        // rendered, its last CR came before the line's LF and was dropped when read again.
        let path = directory.sub("cr.conf")
        try Disk.write(text, to: path)
        let configuration = try Configuration.load(path: path, required: true, environment: [:])
        #expect(!configuration.root.hasSuffix("\r"))
        #expect(!configuration.ignore.contains { $0.hasSuffix("\r") })
        try Disk.write(configuration.rendered, to: path)
        var again = try Configuration.load(path: path, required: true, environment: [:])
        again.sources = configuration.sources
        #expect(again == configuration)
    }

    @Test(
        "A path ending in whitespace before a trailing '/' is refused: its effective form would read back as another path (FuzzConfig)",
        arguments: [
            "[Store]\nRoot=ne; a .loz-\t\t\t\tvequest line; a .loz-config-mNutosaved an answered wit\r\r\r/\r\r\n",
            "[Store]\nRoot=/srv/x /\n", "[Journal]\nDirectory=/var/j\t//\n",
        ])
    func pathEndingInWhitespaceBeforeSlash(text: String) throws {
        let path = directory.sub("slash.conf")
        try Disk.write(text, to: path)
        #expect {
            try Configuration.load(path: path, required: true, environment: [:])
        } throws: { error in
            "\(error)".contains("ends in whitespace before its trailing '/'")
        }
    }

    @Test("A configuration line is trimmed of exactly what Foundation's .whitespaces holds, and CR")
    func whitespaceTrimming() throws {
        let whitespace = CharacterSet.whitespaces.union(CharacterSet(charactersIn: "\r"))
        // Every space separator (Zs), tab, and characters next to them that are not whitespace.
        let spaces: [Unicode.Scalar] = [
            " ", "\t", "\u{A0}", "\u{1680}", "\u{2000}", "\u{2005}", "\u{200A}", "\u{202F}", "\u{205F}", "\u{3000}",
        ]
        let others: [Unicode.Scalar] = [
            "\n", "\r", "\u{0B}", "\u{0C}", "\u{85}", "\u{200B}", "\u{2028}", "\u{FEFF}", "\u{301}", "a", "=",
            "\u{1F600}",
        ]
        let all = spaces + others
        var cases = ["", "a", "a b", " \u{301}a", "x\u{2003}\u{301} "]
        for a in all { for b in all { cases += ["\(a)\(b)", "\(a)k\(b)", "\(a)\(b)k = v\(b)\(a)"] } }
        for text in cases {
            #expect(
                text.trimmingWhitespace() == text.trimmingCharacters(in: whitespace),
                "\(text.unicodeScalars.map(\.value))")
            let sub = ("#" + text + "#").dropFirst().dropLast()
            #expect(sub.trimmingWhitespace() == sub.trimmingCharacters(in: whitespace))
        }
        // Every scalar of the BMP and a sample of the others, alone and around a letter.
        for value in Array(0..<0x1_0000) + Array(stride(from: 0x1_0000, to: 0x11_0000, by: 97)) {
            guard let scalar = Unicode.Scalar(UInt32(value)) else { continue }
            let text = "\(scalar)k\(scalar)"
            if text.trimmingWhitespace() != text.trimmingCharacters(in: whitespace) {
                Issue.record("U+\(String(value, radix: 16)) is trimmed otherwise")
            }
        }
        // Whitespace around a key and a value, in a file.
        let path = directory.sub("spaces.conf")
        try Disk.write("\u{3000}[Autosave]\t\n\u{A0}QuietPeriod\u{2002}=\u{202F}3s\u{205F}\n", to: path)
        #expect(try Configuration.load(path: path, required: true, environment: [:]).quietPeriod == .seconds(3))
    }
}

/// What the random-request test found (`RequestFuzzTests.concurrentWithOtherPrograms`).
@Suite("Random-request finds: a package whose path another program made a file")
struct RequestFuzzRegressionTests {
    /// The daemon trapped (`addFileWrapper: called on a file wrapper that is not a
    /// directory`) when a package with unsaved members met a conflict after another
    /// program had put a regular file where the package was: the conflict copy laid the
    /// members over that file's wrapper.
    @Test("A package's members laid over a regular file make a package of the members alone")
    func packageOverRegularFile() throws {
        var package = PackageDocument()
        try package.apply(.putMember("m.txt", Data("mine\n".utf8)), existingFile: nil)
        try package.apply(.putMember("ch/1.txt", Data("one\n".utf8)), existingFile: nil)
        let theirs = FileWrapper(regularFileWithContents: Data("a file now\n".utf8))
        let wrapper = try package.fileWrapper(configuration: .init(contentType: .package, existingFile: theirs))
        #expect(wrapper.isDirectory)
        #expect(wrapper.fileWrappers?["m.txt"]?.regularFileContents == Data("mine\n".utf8))
        #expect(wrapper.fileWrappers?["ch"]?.fileWrappers?["1.txt"]?.regularFileContents == Data("one\n".utf8))
    }
}
