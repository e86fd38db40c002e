import Control
import Foundation
import Logging
import TestSupport
import Testing

@testable import Autosave

@Suite("Configuration files")
struct ConfigurationTests {
    let directory = TemporaryDirectory("config")

    @Test("Keys, comments, time spans and drop-ins in name order")
    func parsing() throws {
        let path = directory.sub("autosaved.conf")
        try Disk.write(
            """
            # comment
            ; another
            [Store]
            Root = /srv/docs
            PackageExtensions=notes, pkg

            [Autosave]
            QuietPeriod=500ms
            MaxDelay=1min 30s
            MaxConcurrentSaves=8
            RefuseEditsWhenSaveFails=yes

            [Watch]
            OpenNewFiles=no
            PollInterval=500ms

            [Conflicts]
            Keep=memory
            WhenRemoved=close

            [Control]
            BusyPoll=20us
            IOUring=no
            """, to: path)
        try FileManager.default.createDirectory(atPath: path + ".d", withIntermediateDirectories: false)
        try Disk.write("[Autosave]\nMaxConcurrentSaves=2\n", to: path + ".d/10-first.conf")
        try Disk.write("[Autosave]\nMaxConcurrentSaves=3\n[Log]\nLevel=debug\n", to: path + ".d/20-second.conf")
        try Disk.write("[Autosave]\nMaxConcurrentSaves=99\n", to: path + ".d/ignored.txt")

        let configuration = try Configuration.load(path: path, required: true, environment: [:])
        #expect(configuration.root == "/srv/docs")
        #expect(configuration.packageExtensions == ["notes", "pkg"])
        #expect(configuration.quietPeriod == .milliseconds(500))
        #expect(configuration.maxDelay == .seconds(90))
        #expect(configuration.maxConcurrentSaves == 3)
        #expect(configuration.refuseEditsWhenSaveFails)
        #expect(configuration.logLevel == .debug)
        #expect(configuration.sources.count == 3)
        #expect(configuration.rendered.contains("MaxDelay=90s"))
        #expect(configuration.watchEnabled && !configuration.openNewFiles)
        #expect(configuration.pollInterval == .milliseconds(500))
        #expect(configuration.conflictKeep == .memory && configuration.whenRemoved == .close)
        #expect(configuration.rendered.contains("[Conflicts]\nKeep=memory\nWhenRemoved=close\n"))
        #expect(configuration.busyPoll == .microseconds(20))
        #expect(configuration.rendered.contains("\nBusyPoll=20us\nIOUring=no\n"))
        #expect(!configuration.ioURing)
        try Disk.write("[Control]\nBusyPoll=0\n", to: path)
        let defaults = try Configuration.load(path: path, required: true, environment: [:])
        #expect(defaults.busyPoll == .zero)
        #expect(defaults.ioURing && defaults.rendered.contains("\nIOUring=yes\n"))
    }

    @Test("Every problem is reported with its file and line")
    func errors() throws {
        let path = directory.sub("bad.conf")
        try Disk.write(
            """
            [Autosave]
            QuietPeriod=soon
            MaxConcurrentSaves=0
            Colour=blue
            no equals sign here
            [Network]
            Port=1
            [Conflicts]
            Keep=both
            WhenRemoved=shrug
            [Watch]
            PollInterval=1ms
            [Control]
            BusyPoll=1s
            IOUring=sometimes
            """, to: path)
        #expect {
            try Configuration.load(path: path, required: true, environment: [:])
        } throws: { error in
            let lines = (error as! ConfigurationErrors).errors.map(\.description)
            return lines == [
                "\(path):2: QuietPeriod=soon: 'soon' is not a time span (expected e.g. 500ms, 2s, 1min 30s)",
                "\(path):3: MaxConcurrentSaves=0: expected a whole number from 1 to 1024",
                "\(path):4: unknown key Colour= in section [Autosave]; known keys: QuietPeriod=, MaxDelay=, MaxConcurrentSaves=, RetryInterval=, MaxRetryInterval=, RefuseEditsWhenSaveFails=, LoopWriteLimit=",
                "\(path):5: expected Key=value, found: no equals sign here",
                "\(path):6: unknown section [Network]; known sections: [Autosave], [Conflicts], [Control], [Journal], [Log], [Metrics], [Store], [Watch]",
                "\(path):7: Port= is outside any section (or in an unknown one)",
                "\(path):9: Keep=both: expected disk (the other program's file keeps the name) or memory (the unsaved edits do)",
                "\(path):10: WhenRemoved=shrug: expected one of recreate-unsaved, recreate, close",
                "\(path):15: IOUring=sometimes: expected yes or no",
                "\(path):12: PollInterval= must be at least 100ms",
                "\(path):14: [Control] BusyPoll= must be from 0 to 10ms",
            ]
        }
    }

    @Test(
        "A check between keys (MaxDelay= against QuietPeriod=, the journal inside the root) is reported at the line that set the last of them, naming where the others were set"
    )
    func relations() throws {
        let path = directory.sub("r.conf")
        func errors() -> [String] {
            do {
                _ = try Configuration.load(path: path, required: true, environment: [:])
                return []
            } catch { return error.errors.map(\.description) }
        }
        try Disk.write("[Autosave]\nQuietPeriod=10s\nMaxDelay=5s\n", to: path)
        #expect(
            errors() == [
                "\(path):3: MaxDelay= (5s) must not be shorter than QuietPeriod= (10s) ([Autosave] QuietPeriod= is set at \(path):2)"
            ])
        // A drop-in read after the main file breaks the relation: its line is named.
        try Disk.write("[Autosave]\nMaxDelay=5s\n", to: path)
        try FileManager.default.createDirectory(atPath: path + ".d", withIntermediateDirectories: true)
        try Disk.write("# later\n[Autosave]\nQuietPeriod=1min\n", to: path + ".d/10-slow.conf")
        #expect(
            errors() == [
                "\(path).d/10-slow.conf:3: MaxDelay= (5s) must not be shorter than QuietPeriod= (1min) ([Autosave] MaxDelay= is set at \(path):2)"
            ])
        try FileManager.default.removeItem(atPath: path + ".d")
        // One key set, the other at its default.
        try Disk.write("[Store]\nRoot=/srv/docs\n\n[Journal]\nDirectory=/srv/docs/.journal\n", to: path)
        #expect(
            errors() == [
                "\(path):5: [Journal] Directory= (/srv/docs/.journal) must be outside the store root (/srv/docs): the journal is never a document ([Store] Root= is set at \(path):2)"
            ])
        try Disk.write("[Autosave]\nRetryInterval=1h\n", to: path)
        #expect(
            errors() == [
                "\(path):2: MaxRetryInterval= must not be shorter than RetryInterval= ([Autosave] MaxRetryInterval= is its default)"
            ])
    }

    @Test("The embedded default root: STATE_DIRECTORY, else XDG_STATE_HOME/autosaved, else ./autosave-data")
    func defaultRoot() {
        #expect(
            Configuration(environment: ["STATE_DIRECTORY": "/var/lib/autosaved:/other"]).root == "/var/lib/autosaved")
        #expect(
            Configuration(environment: ["XDG_STATE_HOME": "/home/u/.local/state"]).root
                == "/home/u/.local/state/autosaved")
        #expect(Configuration(environment: [:]).root == "./autosave-data")
    }

    @Test("A missing file given explicitly is an error; the default path may be absent")
    func missing() throws {
        #expect(throws: ConfigurationErrors.self) {
            try Configuration.load(path: directory.sub("absent.conf"), required: true, environment: [:])
        }
        let configuration = try Configuration.load(
            path: directory.sub("absent.conf"), required: false, environment: [:])
        #expect(configuration.sources.isEmpty)
    }

    @Test("systemd time spans")
    func timeSpans() throws {
        #expect(try TimeSpan.parse("2s") == .seconds(2))
        #expect(try TimeSpan.parse("250ms") == .milliseconds(250))
        #expect(try TimeSpan.parse("1min 30s") == .seconds(90))
        #expect(try TimeSpan.parse("1h") == .seconds(3600))
        #expect(try TimeSpan.parse("3") == .seconds(3))
        #expect(try TimeSpan.parse("1.5s") == .milliseconds(1500))
        #expect(throws: (any Error).self) { try TimeSpan.parse("2 fortnights") }
        #expect(TimeSpan.format(.milliseconds(500)) == "500ms")
        #expect(TimeSpan.format(.seconds(120)) == "2min")
    }
}

@Suite("JSON values")
struct JSONTests {
    @Test("Parse errors carry line and column")
    func errors() {
        for (text, line, column) in [
            ("", 1, 1), ("{", 1, 2), ("[1,]", 1, 4), ("{\"a\" 1}", 1, 6), ("\n\n  nul", 3, 3), ("\"abc", 1, 1),
        ] {
            #expect {
                try JSONValue(parsing: text)
            } throws: { error in
                let e = error as! JSONSyntaxError
                return e.line == line && e.column == column
            }
        }
    }

    @Test("Round trip keeps member order and escapes")
    func roundTrip() throws {
        let text = #"{"z": 1, "a": [true, null, -1.5e3], "s": "tab\tquote\"\u00e9\ud83d\ude00"}"#
        let value = try JSONValue(parsing: text)
        #expect(value.serialized(pretty: false) == #"{"z":1,"a":[true,null,-1.5e3],"s":"tab\tquote\"é😀"}"#)
        #expect(try JSONValue(parsing: value.serialized()) == value)
    }

    @Test("RFC 6901 pointers, including escapes")
    func pointers() throws {
        let value = try JSONValue(parsing: #"{"a/b": 1, "m~n": 2, "": 3, "arr": [10, 20]}"#)
        #expect(try value.value(at: "/a~1b") == .number("1"))
        #expect(try value.value(at: "/m~0n") == .number("2"))
        #expect(try value.value(at: "/") == .number("3"))
        #expect(try value.value(at: "/arr/1") == .number("20"))
        #expect(try value.value(at: "") == value)
        #expect(throws: JSONValue.PointerError.self) { try value.value(at: "/arr/01") }
        #expect(throws: JSONValue.PointerError.self) { try value.value(at: "arr") }
        #expect(throws: JSONValue.PointerError.self) { try value.value(at: "/m~2n") }
    }

    @Test("RFC 7396 appendix A examples")
    func mergePatch() throws {
        let cases: [(String, String, String)] = [
            (#"{"a":"b"}"#, #"{"a":"c"}"#, #"{"a":"c"}"#),
            (#"{"a":"b"}"#, #"{"b":"c"}"#, #"{"a":"b","b":"c"}"#),
            (#"{"a":"b"}"#, #"{"a":null}"#, #"{}"#),
            (#"{"a":"b","b":"c"}"#, #"{"a":null}"#, #"{"b":"c"}"#),
            (#"{"a":["b"]}"#, #"{"a":"c"}"#, #"{"a":"c"}"#),
            (#"{"a":"c"}"#, #"{"a":["b"]}"#, #"{"a":["b"]}"#),
            (#"{"a":{"b":"c"}}"#, #"{"a":{"b":"d","c":null}}"#, #"{"a":{"b":"d"}}"#),
            (#"{"a":[{"b":"c"}]}"#, #"{"a":[1]}"#, #"{"a":[1]}"#),
            (#"["a","b"]"#, #"["c","d"]"#, #"["c","d"]"#),
            (#"{"a":"b"}"#, #"["c"]"#, #"["c"]"#),
            (#"{"a":"foo"}"#, #"null"#, #"null"#),
            (#"{"a":"foo"}"#, #""bar""#, #""bar""#),
            (#"{"e":null}"#, #"{"a":1}"#, #"{"e":null,"a":1}"#),
            (#"[1,2]"#, #"{"a":"b","c":null}"#, #"{"a":"b"}"#),
            (#"{}"#, #"{"a":{"bb":{"ccc":null}}}"#, #"{"a":{"bb":{}}}"#),
        ]
        for (target, patch, result) in cases {
            let merged = try JSONValue(parsing: target).merging(patch: try JSONValue(parsing: patch))
            #expect(merged == (try JSONValue(parsing: result)), "\(target) + \(patch)")
        }
    }

    /// The merge as RFC 7396 states it, one patch name at a time over the whole object:
    /// what the one-pass merge must equal.
    static func mergedOneNameAtATime(_ target: JSONValue, _ patch: JSONValue) -> JSONValue {
        guard case .object(let patchMembers) = patch else { return patch }
        var members: [(key: String, value: JSONValue)] = []
        if case .object(let existing) = target { members = existing }
        var seen = Set<[UInt8]>()
        for (key, value) in patchMembers.reversed().filter({ seen.insert(Array($0.key.utf8)).inserted }).reversed() {
            let same = { (member: (key: String, value: JSONValue)) in member.key.utf8.elementsEqual(key.utf8) }
            if value == .null {
                members.removeAll(where: same)
            } else if let last = members.lastIndex(where: same) {
                let merged = mergedOneNameAtATime(members[last].value, value)
                members = members.enumerated().compactMap { index, member in
                    index == last ? (member.key, merged) : same(member) ? nil : member
                }
            } else {
                members.append((key, mergedOneNameAtATime(.null, value)))
            }
        }
        return .object(members)
    }

    @Test(
        "A merge patch over objects with repeated and normalization-equal names: as RFC 7396 applied one name at a time (2,000 seeded cases)"
    )
    func mergePatchAgainstTheDefinition() {
        var random = SeededGenerator(state: 7396)
        let names = ["a", "b", "\u{E9}", "e\u{301}", "c"]
        func value(_ depth: Int) -> JSONValue {
            switch Int.random(in: 0..<(depth > 1 ? 3 : 5), using: &random) {
            case 0: return .null
            case 1: return .number("\(Int.random(in: 0..<9, using: &random))")
            case 2: return .string("s")
            default:
                return .object(
                    (0..<Int.random(in: 0..<5, using: &random)).map { _ in
                        (names.randomElement(using: &random)!, value(depth + 1))
                    })
            }
        }
        for _ in 0..<2_000 {
            let target = value(0)
            let patch = value(0)
            #expect(target.merging(patch: patch) == Self.mergedOneNameAtATime(target, patch), "\(target) + \(patch)")
        }
    }

    /// Merged one name at a time, 200,000 names over 200,000 members took minutes (this
    /// test did not end within 200 s), on the thread of whoever sent the `patch`.
    @Test("A merge patch of 200,000 names over an object of 200,000 members", .timeLimit(.minutes(1)))
    func largeMergePatch() {
        let target = JSONValue.object((0..<200_000).map { ("k\($0)", .number("1")) })
        let patch = JSONValue.object((100_000..<300_000).map { ("k\($0)", $0 % 2 == 0 ? .null : .number("2")) })
        guard case .object(let merged) = target.merging(patch: patch) else {
            Issue.record("not an object")
            return
        }
        #expect(merged.count == 100_000 + 100_000 / 2 + 100_000 / 2)
        #expect(merged.first?.key == "k0" && merged.last?.key == "k299999")
    }
}

@Suite("The shipped configuration and its documentation")
struct ShippedConfigurationTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test("Configs/autosaved.conf, uncommented, is valid and gives the embedded defaults")
    func sample() throws {
        let text = try String(contentsOfFile: Self.repository + "/Configs/autosaved.conf", encoding: .utf8)
        let uncommented = text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.hasPrefix("#") && line.dropFirst().first?.isUppercase == true && line.contains("=")
                ? String(line.dropFirst()) : String(line)
        }.joined(separator: "\n")
        let directory = TemporaryDirectory("shipped")
        try Disk.write(uncommented, to: directory.sub("autosaved.conf"))
        var loaded = try Configuration.load(path: directory.sub("autosaved.conf"), required: true, environment: [:])
        loaded.sources = []
        var expected = Configuration(environment: [:])
        expected.root = loaded.root
        #expect(loaded == expected)
        #expect(loaded.root == "/var/lib/autosaved")
    }

    @Test("Every key is in Configs/autosaved.conf and docs/CONFIGURATION.md")
    func documented() throws {
        let sample = try String(contentsOfFile: Self.repository + "/Configs/autosaved.conf", encoding: .utf8)
        let docs = try String(contentsOfFile: Self.repository + "/docs/CONFIGURATION.md", encoding: .utf8)
        for (section, keys) in Configuration.keys {
            #expect(sample.contains("[\(section)]"))
            #expect(docs.contains("## [\(section)]"))
            for key in keys {
                #expect(sample.contains("#\(key)="), "\(key)= is missing from Configs/autosaved.conf")
                #expect(docs.contains("`\(key)=`"), "\(key)= is missing from docs/CONFIGURATION.md")
            }
        }
    }
}

@Suite("docs/PROTOCOL.md")
struct ProtocolDocumentationTests {
    @Test("Every command has a section with an example, and every error code is described")
    func complete() throws {
        let text = try String(
            contentsOfFile: ShippedConfigurationTests.repository + "/docs/PROTOCOL.md", encoding: .utf8)
        for command in ControlProtocol.commands {
            #expect(text.contains("### \(command)") || text.contains(", \(command)\n"), "no section for \(command)")
            #expect(text.contains("\"cmd\": \"\(command)\""), "no example for \(command)")
        }
        for code in ControlProtocol.ErrorCode.allCases {
            #expect(text.contains("`\(code.rawValue)`"), "\(code.rawValue) is not described")
        }
    }
}
