import Control
import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

@testable import Autosave

/// gitignore's pattern semantics, pattern by pattern.
@Suite("Ignore patterns")
struct IgnorePatternTests {
    func ignored(_ patterns: [String], _ path: String, directory: Bool = false, file: String? = nil) -> Bool {
        var configuration = Configuration(environment: [:])
        configuration.ignoreDefaults = false
        configuration.ignore = patterns
        var rules = IgnoreRules(configuration: configuration)
        if let file {
            let parts = file.split(separator: ":", maxSplits: 1).map(String.init)
            rules.setFile(parts[0], IgnorePattern.parse(parts[1], file: parts[0] + "/.autosavedignore", base: parts[0]))
        }
        return rules.ignoring(path, isDirectory: directory) != nil
    }

    @Test(
        "Names at any depth, anchoring, wildcards, classes, **, directory-only and re-included patterns",
        arguments: [
            (["*.log"], "a.log", false, true), (["*.log"], "d/e/a.log", false, true),
            (["*.log"], "a.logx", false, false),
            (["/a.txt"], "a.txt", false, true), (["/a.txt"], "d/a.txt", false, false),
            (["d/a.txt"], "d/a.txt", false, true), (["d/a.txt"], "x/d/a.txt", false, false),
            (["a?c"], "abc", false, true), (["a?c"], "a/c", false, false), (["a*c"], "a/c", false, false),
            (["[ab]x"], "bx", false, true), (["[!ab]x"], "bx", false, false), (["[a-c]x"], "cx", false, true),
            (["[^a-c]x"], "dx", false, true), (["\\#x"], "#x", false, true), (["\\!x"], "!x", false, true),
            (["**/b"], "b", false, true), (["**/b"], "a/c/b", false, true), (["a/**"], "a/b/c", false, true),
            (["a/**"], "a", true, false), (["a/**/b"], "a/b", false, true), (["a/**/b"], "a/x/y/b", false, true),
            (["a/**/b"], "ab", false, false), (["a**b"], "a/x/b", false, false), (["a**b"], "axxb", false, true),
            (["build/"], "build", true, true), (["build/"], "build", false, false),
            (["build/"], "build/x.txt", false, true),
            (["*.txt", "!keep.txt"], "keep.txt", false, false), (["*.txt", "!keep.txt"], "other.txt", false, true),
            // A path inside an ignored directory cannot be re-included.
            (["d/", "!d/keep.txt"], "d/keep.txt", false, true),
            (["*~"], "b.txt~", false, true), (["\\#*#"], "#a#", false, true), (["#*#"], "#a#", false, false),
            (["a\\*"], "a*", false, true),
            (["a\\*"], "ab", false, false), (["*"], "anything/at/all", false, true), (["[a"], "[a", false, false),
        ] as [([String], String, Bool, Bool)])
    func patterns(_ patterns: [String], _ path: String, _ directory: Bool, _ expected: Bool) {
        #expect(ignored(patterns, path, directory: directory) == expected, "\(patterns) on \(path)")
    }

    @Test("The shared rules remember a directory found not ignored and answer as the rules do, replaced or not")
    func sharedRulesRememberADirectory() {
        var configuration = Configuration(environment: [:])
        configuration.ignore = ["build/", "*.tmp", "d/x.txt"]
        let first = IgnoreRules(configuration: configuration)
        var withFile = first
        withFile.setFile("d", IgnorePattern.parse("secret*", file: "d/.autosavedignore", base: "d"))
        let shared = SharedIgnoreRules(first)
        // Paths in one directory after another (each first one remembered), names the
        // directory's memory must not let through, and directories ignored themselves.
        let paths: [(String, Bool)] = [
            ("d/a.txt", false), ("d/b.txt", false), ("d/x.txt", false), ("d/c.tmp", false), ("d/.a.txt.swp", false),
            ("d/secret.txt", false), ("d/build", true), ("d/build", false), ("d/e/f.txt", false),
            ("d/e/.git", true), ("build/a.txt", false), ("build/b.txt", false), ("a.txt", false), ("d/a.txt", false),
            ("x/build/y/z.txt", false), ("x/build/y/w.txt", false), ("x/.git/HEAD", false), ("x/.git/index", false),
        ]
        for rules in [first, withFile] {
            shared.replace(rules)
            for (path, isDirectory) in paths + paths {
                #expect(
                    shared.ignoring(path, isDirectory: isDirectory)?.description
                        == rules.ignoring(path, isDirectory: isDirectory)?.description, "\(path)")
            }
        }
        // Replaced by rules that ignore the remembered directory: its next path is ignored.
        shared.replace(first)
        #expect(shared.ignoring("d/a.txt", isDirectory: false) == nil)
        configuration.ignore = ["d/"]
        shared.replace(IgnoreRules(configuration: configuration))
        #expect(shared.ignoring("d/b.txt", isDirectory: false) != nil)
    }

    @Test("An ignore file's patterns apply below its directory, win over Ignore=, and are named in the match")
    func files() throws {
        #expect(ignored([], "notes/x.tmp", file: "notes:*.tmp"))
        #expect(!ignored([], "x.tmp", file: "notes:*.tmp"))
        #expect(ignored([], "notes/sub/x.tmp", file: "notes:*.tmp"))
        #expect(ignored([], "notes/a/x", file: "notes:/a/x"))
        #expect(!ignored([], "notes/b/a/x", file: "notes:/a/x"))
        #expect(!ignored(["*.tmp"], "notes/x.tmp", file: "notes:!x.tmp"))
        var rules = IgnoreRules(configuration: Configuration(environment: [:]))
        rules.setFile("", IgnorePattern.parse("# comment\n\n*.bak  \nlogs/\n", file: ".autosavedignore", base: ""))
        #expect(rules.files[""]?.map(\.text) == ["*.bak", "logs/"])
        let match = try #require(rules.ignoring("a.bak", isDirectory: false))
        #expect(match.description == "'*.bak' (.autosavedignore line 3)")
        #expect(rules.ignoring(".git/HEAD", isDirectory: false)?.text == ".git")
        #expect(rules.ignoring("d/.autosavedignore", isDirectory: false) != nil, "ignore files are never documents")
    }

    /// The matcher looks up no directory deeper than the deepest ignore file (FuzzIgnore
    /// found every prefix looking up every directory above it: 24 s of CPU for one input).
    /// The bound follows the files: it grows with a deeper one, shrinks when it goes.
    @Test("Ignore files at every depth apply below their directory, as files come and go, for paths of many components")
    func fileDepths() {
        var configuration = Configuration(environment: [:])
        configuration.ignoreDefaults = false
        var rules = IgnoreRules(configuration: configuration)
        func file(_ directory: String, _ text: String) {
            rules.setFile(directory, IgnorePattern.parse(text, file: directory + "/.autosavedignore", base: directory))
        }
        let deep = (0..<300).map { "d\($0)" }.joined(separator: "/")
        file("a", "*.one\n")
        #expect(rules.ignoring("a/b/c/x.one", isDirectory: false)?.text == "*.one")
        #expect(rules.ignoring("a/b/c/x.two", isDirectory: false) == nil)
        file("a/b/c", "*.two\n!keep.one\n")
        #expect(rules.ignoring("a/b/c/x.two", isDirectory: false)?.text == "*.two")
        #expect(rules.ignoring("a/b/c/d/e/x.two", isDirectory: false)?.text == "*.two")
        #expect(rules.ignoring("a/b/c/keep.one", isDirectory: false) == nil, "the deeper file re-includes")
        #expect(rules.ignoring("a/b/x.two", isDirectory: false) == nil)
        file(deep, "*.three\n")
        #expect(rules.ignoring(deep + "/x.three", isDirectory: false)?.text == "*.three")
        #expect(rules.ignoring(deep + "/e/f/x.three", isDirectory: false)?.text == "*.three")
        #expect(rules.ignoring(deep + "/x.two", isDirectory: false) == nil)
        #expect(rules.ignoring("a/b/c/" + deep + "/x.two", isDirectory: false)?.text == "*.two")
        // The deepest file goes: the others still apply at every depth.
        file(deep, "")
        #expect(rules.ignoring(deep + "/x.three", isDirectory: false) == nil)
        #expect(rules.ignoring("a/b/c/" + deep + "/keep.one", isDirectory: false) == nil)
        #expect(rules.ignoring("a/b/c/" + deep + "/x.one", isDirectory: false)?.text == "*.one")
        file("a/b/c", "")
        #expect(rules.ignoring("a/b/c/keep.one", isDirectory: false)?.text == "*.one")
        rules.forgetFiles()
        #expect(rules.ignoring("a/x.one", isDirectory: false) == nil)
        file("", "*.root\n")
        #expect(rules.ignoring(deep + "/x.root", isDirectory: false)?.text == "*.root")
    }
    @Test("The built-in defaults cover version control, editors' files and desktop litter, unless turned off")
    func defaults() {
        let rules = IgnoreRules(configuration: Configuration(environment: [:]))
        for path in [
            ".git/HEAD", "d/.hg/store", ".svn", ".bzr/x", "_darcs/p", ".jj/repo", "CVS/Entries", ".a.txt.swp",
            "d/.b.md.swo", ".c.swx", "4913", "a.txt~", "#a.txt#", ".#a.txt", ".a.txt.kate-swp", ".goutputstream-AB12",
            "a.txt___jb_tmp___", "a.txt___jb_old___", ".DS_Store", "d/Thumbs.db", "desktop.ini",
        ] {
            #expect(rules.ignoring(path, isDirectory: false) != nil, "\(path)")
        }
        for path in ["a.txt", "notes/todo.md", "git/HEAD", "a.swp", "x4913", "d/a.json"] {
            #expect(rules.ignoring(path, isDirectory: false) == nil, "\(path)")
        }
        var configuration = Configuration(environment: [:])
        configuration.ignoreDefaults = false
        #expect(IgnoreRules(configuration: configuration).ignoring(".git/HEAD", isDirectory: false) == nil)
    }

    @Test("Ignore= adds patterns, an empty assignment resets them, IgnoreFile= takes a name; --check-config lists them")
    func configuration() throws {
        var configuration = Configuration(environment: [:])
        #expect(configuration.apply("[Store]\nIgnore=*.log build/\nIgnore=*.tmp\n", file: "c").isEmpty)
        #expect(configuration.ignore == ["*.log", "build/", "*.tmp"])
        #expect(configuration.apply("[Store]\nIgnore=\nIgnore=x\n", file: "c").isEmpty)
        #expect(configuration.ignore == ["x"])
        let errors = configuration.apply("[Store]\nIgnoreFile=a/b\nIgnoreDefaults=maybe\n", file: "c")
        #expect(errors.map { $0.line } == [2, 3])
        #expect(errors.first?.message.contains("not a path") == true)
        #expect(configuration.rendered.contains("#   .git  (built-in default"))
        #expect(configuration.rendered.contains("#   x  (Ignore= in the configuration)"))
    }

    @Test(
        "Ignore= takes a pattern with whitespace in quotes, as systemd reads a list, a quote inside a pattern staying a character of it; --check-config writes it back so"
    )
    func quotedPatterns() throws {
        var configuration = Configuration(environment: [:])
        let text = #"[Store]"# + "\n" + ##"Ignore="My Notes/" 'say "hi".txt' "draft v2"/*.tmp a\#b x"y"##
        #expect(configuration.apply(text + "\nIgnore=don't.txt *.log that's.txt\n", file: "c").isEmpty)
        // A quote inside an unquoted pattern is a character of it, as before quotes were read.
        #expect(
            configuration.ignore == [
                "My Notes/", #"say "hi".txt"#, "draft v2/*.tmp", ##"a\#b"##, #"x"y"#, "don't.txt", "*.log",
                "that's.txt",
            ])
        let rules = IgnoreRules(configuration: configuration)
        #expect(rules.ignoring("My Notes", isDirectory: true) != nil)
        #expect(rules.ignoring("My Notes/a.txt", isDirectory: false) != nil)
        #expect(rules.ignoring("Notes/a.txt", isDirectory: false) == nil)
        #expect(rules.ignoring(#"say "hi".txt"#, isDirectory: false) != nil)
        #expect(rules.ignoring("draft v2/x.tmp", isDirectory: false) != nil)
        #expect(rules.ignoring("don't.txt", isDirectory: false) != nil)
        #expect(rules.ignoring("a.log", isDirectory: false) != nil)
        // The rendering read again gives the same list, patterns starting with a quote too.
        configuration.ignore += [#""quoted"#, "'a b'", #"both ' and " and space"#]
        var again = Configuration(environment: [:])
        #expect(again.apply(configuration.rendered, file: "rendered").isEmpty)
        #expect(again.ignore == configuration.ignore, "\(configuration.rendered)")
        // A quote left open is named, at its line, and changes nothing.
        var refused = Configuration(environment: [:])
        let errors = refused.apply("[Store]\nIgnore=*.log\nIgnore=\"My Notes/\n", file: "c")
        #expect(errors.map(\.line) == [3])
        #expect(errors.first?.message.contains("quote") == true, "\(errors)")
        #expect(refused.ignore == ["*.log"])
    }
}

/// Writes `text` to `path`, making its directories first.
private func write(_ text: String, to path: String) throws {
    try FileManager.default.createDirectory(atPath: PathName.parent(path), withIntermediateDirectories: true)
    try Disk.write(text, to: path)
}

/// Ignore rules on a real root, with real programs: git, vim, an ignore file edited while running.
@Suite("Ignored paths on a real root", .serialized, .timeLimit(.minutes(3)))
struct IgnoreTests {
    func harness(configure: (inout Configuration) -> Void = { _ in }) async throws -> StoreHarness {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600), configure: configure)
        return harness
    }

    @discardableResult
    func sh(_ script: String, in root: String) throws -> Machine.Output {
        let result = try Machine.run("/bin/sh", ["-c", "cd '\(root)' && " + script])
        #expect(result.status == 0, "\(script): \(result.stderr)")
        return result
    }

    func openedPaths(_ harness: StoreHarness) async -> [String] {
        await harness.log.events.compactMap {
            if case .opened(let document) = $0 { return document }
            return nil
        }
    }

    @Test(
        "A directory renamed to a name the rules ignore (d → d~): its documents are closed, its watches given back — changes inside it later are not taken for lost events (no rescan)"
    )
    func directoryRenamedToAnIgnoredName() async throws {
        let harness = try await self.harness()
        try FileManager.default.createDirectory(atPath: harness.file("d/e"), withIntermediateDirectories: true)
        try Disk.write("a\n", to: harness.file("d/a.txt"))
        try Disk.write("b\n", to: harness.file("d/e/b.txt"))
        try await harness.store.startWatching()
        try await harness.store.open("d/a.txt")
        try sh("mv d d~", in: harness.root)
        await harness.store.sync()
        await #expect(throws: StoreError.self) { try await harness.store.info("d/a.txt") }
        try sh("echo more >> d~/a.txt && echo c > d~/e/c.txt && mkdir d~/f && echo g > d~/f/g.txt", in: harness.root)
        await harness.store.sync()
        #expect(await harness.store.watchCounters.overflows == 0, "no rescan")
        #expect(await harness.store.watchSummary?.watchedDirectories == 1, "the root alone")
        #expect(!(await harness.store.isOpen("d~/a.txt")))
    }

    @Test("git init, commits, checkout of another branch and gc leave no document under .git/ and git status clean")
    func git() async throws {
        guard Machine.has("git") else { throw Failure("git is not installed (scripts/bootstrap installs it)") }
        let harness = try await harness()
        let git = "git -c user.name=t -c user.email=t@example.org -c init.defaultBranch=main"
        try write("one\n", to: harness.file("a.txt"))
        try sh("\(git) init -q && \(git) add a.txt && \(git) commit -qm one", in: harness.root)
        await harness.store.openAll()
        try await harness.store.startWatching()
        #expect(await harness.store.list().map(\.path) == ["a.txt"])
        // Only the root has a watch: nothing inside .git/ is watched.
        #expect(await harness.store.watchSummary?.watchedDirectories == 1)

        try sh(
            "\(git) checkout -qb other && echo two > a.txt && echo new > b.txt && \(git) add -A && \(git) commit -qm two",
            in: harness.root)
        await harness.store.sync()
        #expect(try await harness.store.read("b.txt") == .text("new\n"))
        try sh("\(git) checkout -q main && \(git) gc -q --prune=now", in: harness.root)
        await harness.store.sync()
        #expect(try await harness.store.read("a.txt") == .text("one\n"), "the checkout is read again")
        let paths = await harness.store.list().map(\.path)
        #expect(paths == ["a.txt"], "b.txt went with the checkout; nothing under .git/")
        #expect(await openedPaths(harness).allSatisfy { !$0.hasPrefix(".git") })
        #expect(await harness.store.watchSummary?.watchedDirectories == 1)
        let status = try sh("git status --porcelain --ignored", in: harness.root)
        #expect(status.stdout.isEmpty, "git sees no file of the daemon's: \(status.stdout)")
        await harness.store.stopWatching()
    }

    @Test("vim editing a document (swap file, 4913 probe, a backup) adds no document; the edit is read again")
    func vim() async throws {
        guard Machine.has("vim"), Machine.has("script") else {
            throw Failure("vim or script is not installed (scripts/bootstrap installs them)")
        }
        let harness = try await harness()
        try write("one\n", to: harness.file("a.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        // vim waits on a FIFO after writing, with its swap file still there.
        let fifo = harness.directory.sub("hold")
        #expect(mkfifo(fifo, 0o600) == 0)
        let vim = Process()
        vim.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        vim.currentDirectoryURL = URL(fileURLWithPath: harness.root)
        vim.arguments = [
            "-qec",
            "vim -u NONE -i NONE -N -X -c 'set backup backupskip= backupcopy=auto' -c 'normal Gotwo' -c 'w' -c 'silent !cat \(fifo) >/dev/null' -c 'q' a.txt",
            "/dev/null",
        ]
        vim.standardOutput = FileHandle.nullDevice
        vim.standardInput = Pipe()
        try vim.run()
        // Opening the FIFO for writing returns once vim reads it: the write is done, the swap file is there.
        let hold = open(fifo, O_WRONLY)
        #expect(hold >= 0)
        await harness.store.sync()
        #expect(FileManager.default.fileExists(atPath: harness.file(".a.txt.swp")), "vim's swap file exists")
        #expect(FileManager.default.fileExists(atPath: harness.file("a.txt~")), "vim's backup exists")
        #expect(await harness.store.list().map(\.path) == ["a.txt"])
        close(hold)
        vim.waitUntilExit()
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["a.txt"])
        #expect(try await harness.store.read("a.txt") == .text("one\ntwo\n"))
        // vim renames a.txt to its backup and writes a new a.txt: the document may be closed and opened again.
        #expect(
            await openedPaths(harness).allSatisfy { $0 == "a.txt" }, "no swap file, probe or backup was ever opened")
        #expect(await harness.store.ignoreSummary.ignoredPaths >= 1)
        await harness.store.stopWatching()
    }

    @Test(
        "Two directories whose names differ only in Unicode normalization, an ignore file in each: each file's patterns apply in its own directory, at start-up and once one of them changes"
    )
    func ignoreFilesInTwoNormalizations() async throws {
        let harness = try await harness()
        let composed = "d\u{E9}"
        let decomposed = "de\u{301}"
        try write("*.log\n", to: harness.file(composed + "/.autosavedignore"))
        try write("*.tmp\n", to: harness.file(decomposed + "/.autosavedignore"))
        for directory in [composed, decomposed] {
            for name in ["a.log", "a.tmp", "a.txt"] { try write("x\n", to: harness.file(directory + "/" + name)) }
        }
        await harness.store.openAll()
        // Told apart by bytes (`String`'s `==` takes the two spellings for one).
        func opened() async -> [String] {
            await harness.store.list().map { document in
                let spelling = document.path.utf8.starts(with: (composed + "/").utf8) ? "composed/" : "decomposed/"
                return spelling + document.path.split(separator: "/").last!
            }.sorted()
        }
        #expect(await opened() == ["composed/a.tmp", "composed/a.txt", "decomposed/a.log", "decomposed/a.txt"])
        #expect(await harness.store.ignoreSummary.files.count == 2)
        try await harness.store.startWatching()
        try write("*.txt\n", to: harness.file(decomposed + "/.autosavedignore"))
        await harness.store.sync()
        await harness.next { $0 == .closed(document: decomposed + "/a.txt") }
        #expect(await opened() == ["composed/a.tmp", "composed/a.txt", "decomposed/a.log", "decomposed/a.tmp"])
        await harness.store.stopWatching()
    }

    @Test("An ignore file written while running closes what it ignores; removing a pattern opens what it hid")
    func ignoreFileLive() async throws {
        let harness = try await harness()
        try write("log\n", to: harness.file("logs/x.log"))
        try write("keep\n", to: harness.file("logs/keep.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        #expect(await harness.store.list().map(\.path) == ["logs/keep.txt", "logs/x.log"])
        try await harness.store.apply(.setText("edited log\n"), to: "logs/x.log")

        try write("# logs are not documents\n*.log\n", to: harness.file(".autosavedignore"))
        await harness.store.sync()
        await harness.next { $0 == .closed(document: "logs/x.log") }
        #expect(await harness.store.ignoreSummary.files == [""])
        #expect(try harness.text(onDisk: "logs/x.log") == "edited log\n", "its unsaved edit was saved first")
        #expect(await harness.store.list().map(\.path) == ["logs/keep.txt"])
        do {
            _ = try await harness.store.read("logs/x.log")
            Issue.record("an ignored path was read")
        } catch {
            #expect(error.code == "invalid-path")
            #expect(error.description.contains("'*.log' (.autosavedignore line 2)"), "\(error)")
        }
        try write("new\n", to: harness.file("logs/y.log"))
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["logs/keep.txt"])

        try write("# nothing\n", to: harness.file(".autosavedignore"))
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["logs/keep.txt", "logs/x.log", "logs/y.log"])
        #expect(await harness.store.ignoreSummary.files == [], "an ignore file without patterns counts for nothing")
        await harness.store.stopWatching()
    }

    @Test(
        "An ignore file replaced by rename (sed -i, an editor's save) is read again; moved away, its rules go with it"
    )
    func ignoreFileRenamed() async throws {
        let harness = try await harness()
        try write("*.log\n", to: harness.file(".autosavedignore"))
        try write("a\n", to: harness.file("a.log"))
        try write("b\n", to: harness.file("b.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        #expect(await harness.store.list().map(\.path) == ["b.txt"])

        try sh("sed -i 's/log/txt/' .autosavedignore", in: harness.root)
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["a.log"], "the rules the new file holds")

        try sh("mv .autosavedignore old-rules", in: harness.root)
        await harness.store.sync()
        #expect(await harness.store.ignoreSummary.files == [])
        try write("c\n", to: harness.file("c.txt"))
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["a.log", "b.txt", "c.txt", "old-rules"])
        await harness.store.stopWatching()
    }

    @Test("A directory renamed with an ignore file in it: the rules follow it, and its old name is ruled by nothing")
    func directoryWithIgnoreFileRenamed() async throws {
        let harness = try await harness()
        try write("*.log\n", to: harness.file("d/.autosavedignore"))
        try write("x\n", to: harness.file("d/x.log"))
        try write("k\n", to: harness.file("d/k.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        #expect(await harness.store.list().map(\.path) == ["d/k.txt"])

        try sh("mv d e && mkdir d && echo y > d/y.log", in: harness.root)
        await harness.store.sync()
        #expect(await harness.store.ignoreSummary.files == ["e"])
        #expect(await harness.store.list().map(\.path) == ["d/y.log", "e/k.txt"])
        #expect(!(await openedPaths(harness)).contains("e/x.log"))
        await harness.store.stopWatching()
    }

    @Test("A directory moved in from outside the root: its own ignore file applies before any of its files is opened")
    func directoryMovedInWithIgnoreFile() async throws {
        let harness = try await harness()
        let outside = harness.root + ".outside"
        defer { try? FileManager.default.removeItem(atPath: outside) }
        try write("*.log\n", to: outside + "/new/.autosavedignore")
        for name in ["a1.log", "a2.log", "a3.log", "keep.txt"] { try write("n\n", to: outside + "/new/" + name) }
        // A deeper ignore file, read with the other before anything is opened.
        try write("*.dat\n", to: outside + "/new/sub/.autosavedignore")
        for name in ["s1.dat", "s2.dat", "deeper/d1.dat", "deeper/keep.txt"] {
            try write("n\n", to: outside + "/new/sub/" + name)
        }
        await harness.store.openAll()
        try await harness.store.startWatching()
        try sh("mv '\(outside)/new' new", in: harness.root)
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["new/keep.txt", "new/sub/deeper/keep.txt"])
        #expect(
            await openedPaths(harness).filter { $0.hasSuffix(".dat") } == [], "nor one a deeper ignore file ignores")
        #expect(
            await openedPaths(harness).filter { $0.hasSuffix(".log") } == [],
            "no ignored file was opened, even for a moment")
        await harness.store.stopWatching()
    }

    @Test(
        "Directories renamed across the rules: onto an ignored name its ignore file's rules go, out of one its files are opened and its ignore file read, and existing rules apply to documents under a directory's new name"
    )
    func directoriesRenamedAcrossTheRules() async throws {
        let harness = try await harness()
        try write("build/\n/e/*.log\n", to: harness.file(".autosavedignore"))
        try write("*.tmp\n", to: harness.file("d/.autosavedignore"))
        try write("w\n", to: harness.file("d/w.txt"))
        try write("*.dat\n", to: harness.file("build/.autosavedignore"))
        try write("o\n", to: harness.file("build/out.txt"))
        try write("o\n", to: harness.file("build/out.dat"))
        try write("x\n", to: harness.file("f/x.log"))
        try write("y\n", to: harness.file("f/y.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        #expect(await harness.store.list().map(\.path) == ["d/w.txt", "f/x.log", "f/y.txt"])

        // d onto the ignored name build (what was there moved aside first): d's rules are gone with it.
        try sh("mv build g && mv d build && mkdir d && echo z > d/z.tmp", in: harness.root)
        await harness.store.sync()
        #expect(
            await harness.store.list().map(\.path).contains("d/z.tmp"), "no rule of the old d applies to the new one")
        // build out of its ignored name, as g: its files opened, its ignore file read.
        #expect(await harness.store.list().map(\.path).contains("g/out.txt"))
        #expect(!(await harness.store.list().map(\.path).contains("g/out.dat")))
        #expect(await harness.store.ignoreSummary.files == ["", "g"])

        // f to e, where /e/*.log applies: e/x.log is closed.
        try sh("mv f e", in: harness.root)
        await harness.store.sync()
        #expect(await harness.store.list().map(\.path) == ["d/z.tmp", "e/y.txt", "g/out.txt"])
        await harness.store.stopWatching()
    }

    @Test(
        "A file named like an ignore file inside a package is a member, not rules: the package's directories stay watched"
    )
    func ignoreFileNameInsideAPackage() async throws {
        let harness = try await harness()
        try write("s\n", to: harness.file("p.package/sub/s.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        try write("sub/\n", to: harness.file("p.package/.autosavedignore"))
        await harness.store.sync()
        #expect(await harness.store.ignoreSummary.files == [])
        try write("changed\n", to: harness.file("p.package/sub/s.txt"))
        await harness.store.sync()
        #expect(try await harness.store.read("p.package", .member("sub/s.txt")) == .data(Data("changed\n".utf8)))
        await harness.store.stopWatching()
    }

    @Test(
        "A directory inside a package that an ignore pattern matches (.git by default, build/ by Ignore=) holds members: it is watched, so another program's change below it reloads the member; outside a package the same directories stay unwatched"
    )
    func ignoredDirectoryInsideAPackage() async throws {
        let harness = try await harness { $0.ignore = ["build/"] }
        try write("config\n", to: harness.file("p.package/.git/config"))
        try write("out\n", to: harness.file("p.package/build/deep/out.txt"))
        try write("outside\n", to: harness.file("build/x.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        let watcher = try #require(await harness.store.watcher)
        #expect(watcher.isWatching("p.package/.git"))
        #expect(watcher.isWatching("p.package/build") && watcher.isWatching("p.package/build/deep"))
        #expect(!watcher.isWatching("build"), "outside a package, an ignored directory gets no watch")

        func changesSeen() async -> Int {
            await harness.log.events.filter { $0 == .changedOnDisk(document: "p.package") }.count
        }
        try write("config changed\n", to: harness.file("p.package/.git/config"))
        await harness.store.sync()
        #expect(await changesSeen() == 1, "the change below .git/ was seen as the package's")
        try write("out changed\n", to: harness.file("p.package/build/deep/out.txt"))
        await harness.store.sync()
        #expect(await changesSeen() == 2, "the change below build/ was seen as the package's")
        #expect(
            try await harness.store.read("p.package", .member(".git/config")) == .data(Data("config changed\n".utf8)))
        #expect(
            try await harness.store.read("p.package", .member("build/deep/out.txt"))
                == .data(Data("out changed\n".utf8)))

        // A rules change keeps them: they are the package's.
        watcher.ignoreRulesChanged()
        #expect(watcher.isWatching("p.package/.git") && watcher.isWatching("p.package/build/deep"))
        await harness.store.stopWatching()
    }

    @Test(
        "A document that becomes ignored and is edited while the save before its close runs is saved again, then closed"
    )
    func ignoredWhileEditedDuringItsSave() async throws {
        let harness = try await harness()
        try write("log\n", to: harness.file("logs/x.log"))
        try write("keep\n", to: harness.file("logs/keep.txt"))
        await harness.store.openAll()
        try await harness.store.startWatching()
        let store = harness.store
        try await store.apply(.setText("edited\n"), to: "logs/x.log")
        await store.afterFirstRename(of: harness.file("logs/x.log")) {
            try await store.apply(.setText("during the save\n"), to: "logs/x.log")
        }
        try write("*.log\n", to: harness.file(".autosavedignore"))
        await store.sync()
        await harness.next { $0 == .closed(document: "logs/x.log") }
        await store.setAfterRename(nil)
        #expect(
            try harness.text(onDisk: "logs/x.log") == "during the save\n", "the edit made during the save was saved")
        #expect(await store.list().map(\.path) == ["logs/keep.txt"])
        await store.stopWatching()
    }

    @Test(
        "An ignore file written among changes whose reports were lost (the watcher's queue overflowed): the rescan reads and applies it, whether new files are opened (OpenNewFiles=) or not",
        .enabled(if: Machine.isRoot, "writing /proc/sys/fs/inotify needs root"), arguments: [true, false])
    func ignoreFileLostInAnOverflow(openNewFiles: Bool) async throws {
        // The watcher gets one slot.
        let harness = try await StoreHarness.withOneReportQueue {
            let made = try await self.harness { $0.openNewFiles = openNewFiles }
            for i in 0..<50 { try write("v0\n", to: made.file("d\(i).txt")) }
            try write("log\n", to: made.file("x.log"))
            await made.store.openAll()
            try await made.store.startWatching()
            return made
        }
        #expect(await harness.store.list().map(\.path).contains("x.log"))
        // One process, as fast as it can: far more reports than the queue holds, the ignore
        // file's last, its own reports lost among the others.
        try sh(
            "for r in 1 2 3 4 5; do for i in $(seq 0 49); do echo v$r > d$i.txt; done; done; printf '*.log\\n' > .autosavedignore",
            in: harness.root)
        await harness.store.sync()
        #expect(await harness.store.watchCounters.overflows >= 1, "the burst overflowed the one-report queue")
        #expect(await harness.store.ignoreSummary.files == [""])
        #expect(!(await harness.store.list().map(\.path).contains("x.log")), "the document it ignores is closed")
        await harness.store.stopWatching()
    }

    @Test(
        "A file named like an ignore file inside a package is a member, at a reload and in --check-config as at start-up: no rules from it"
    )
    func ignoreFileNameInsideAPackageAtReload() async throws {
        let harness = try await harness()
        try write("sub/\n", to: harness.file("p.package/.autosavedignore"))
        try write("s\n", to: harness.file("p.package/sub/s.txt"))
        try write("a\n", to: harness.file("a.txt"))
        await harness.store.openAll()
        #expect(await harness.store.ignoreSummary.files == [])
        var configuration = await harness.store.configuration
        configuration.ignore = ["*.bak"]
        await harness.store.reconfigure(configuration)
        #expect(await harness.store.ignoreSummary.files == [], "the package's member is no ignore file")
        #expect(await harness.store.list().map(\.path) == ["a.txt", "p.package"])

        try Disk.write("[Store]\nRoot=\(harness.root)\n", to: harness.directory.sub("check.conf"))
        let check = try Machine.run(
            Machine.product("autosaved"), ["--check-config", "--config", harness.directory.sub("check.conf")])
        #expect(check.status == 0, "\(check.stderr)")
        #expect(!check.stdout.contains("p.package/.autosavedignore"), "\(check.stdout)")
    }

    @Test("Ignore files found at start-up apply below their own directory, a deeper one over a shallower one")
    func nestedAtStart() async throws {
        let harness = try await harness()
        try write("*.tmp\n", to: harness.file("d/.autosavedignore"))
        try write("!keep.tmp\n", to: harness.file("d/e/.autosavedignore"))
        for path in ["x.tmp", "d/x.tmp", "d/e/x.tmp", "d/e/keep.tmp"] { try write("t\n", to: harness.file(path)) }
        await harness.store.openAll()
        #expect(await harness.store.list().map(\.path) == ["d/e/keep.tmp", "x.tmp"])
        #expect(await harness.store.ignoreSummary.files == ["d", "d/e"])
    }

    @Test("A reload that removes a pattern opens the files it hid; IgnoreDefaults=no makes .git/HEAD a document")
    func reload() async throws {
        let harness = try await harness { $0.ignore = ["*.tmp"] }
        try write("t\n", to: harness.file("a.tmp"))
        try write("ref: refs/heads/main\n", to: harness.file(".git/HEAD"))
        await harness.store.openAll()
        #expect(await harness.store.list().map(\.path).isEmpty)
        var configuration = await harness.store.configuration
        configuration.ignore = []
        await harness.store.reconfigure(configuration)
        #expect(await harness.store.list().map(\.path) == ["a.tmp"])
        configuration.ignoreDefaults = false
        await harness.store.reconfigure(configuration)
        #expect(await harness.store.list().map(\.path) == [".git/HEAD", "a.tmp"])
        configuration.ignore = ["a.*"]
        configuration.ignoreDefaults = true
        await harness.store.reconfigure(configuration)
        #expect(await harness.store.list().map(\.path).isEmpty)
    }
}

/// Requests naming ignored paths, through the built daemon and autosavectl.
@Suite("Ignored paths through the socket", .serialized, .timeLimit(.minutes(2)))
struct IgnoredRequestTests {
    @Test("get, set and create of .git/HEAD, .a.txt.swp and a path under .git/ are refused naming the rule")
    func refused() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        try write("ref: refs/heads/main\n", to: daemon.root + "/.git/HEAD")
        try write("swap\n", to: daemon.root + "/.a.txt.swp")
        for path in [".git/HEAD", ".a.txt.swp", ".git/objects/new.txt", "d/Thumbs.db"] {
            for command in [
                ["get", path], ["set", path, "--text", "x"], ["create", path], ["save", path, "--wait"],
            ] {
                let result = try daemon.ctl(command)
                #expect(result.status == 1, "\(command): \(result)")
                #expect(
                    result.stderr.contains("invalid-path") && result.stderr.contains("it is ignored: it matches '"),
                    "\(command): \(result.stderr)")
                #expect(result.stderr.contains("built-in default"), "\(result.stderr)")
            }
        }
        let status = try daemon.ctl("--json", "status")
        #expect(status.stdout.contains("\"ignore\""), "\(status.stdout)")
        let list = try daemon.ctl("list")
        #expect(list.stdout == "no open documents\n", "\(list)")
        #expect(try String(contentsOfFile: daemon.root + "/.git/HEAD", encoding: .utf8) == "ref: refs/heads/main\n")
        #expect(try String(contentsOfFile: daemon.root + "/.a.txt.swp", encoding: .utf8) == "swap\n")
        #expect(!FileManager.default.fileExists(atPath: daemon.root + "/.git/objects/new.txt"))
        #expect(await daemon.stop() == 0)
    }

    @Test("A refused edit of a new document creates nothing: set new.json with text that is not JSON")
    func refusedCreation() async throws {
        let daemon = try await RunningDaemon(quiet: "50ms")
        let client = try daemon.client()
        _ = try client.send(["cmd": "subscribe", "events": ["saved", "closed"]])
        _ = try client.receive()
        var result = try daemon.ctl("set", "new.json", "--text", "nope")
        #expect(result.status == 1 && result.stderr.contains("bad-request"), "\(result)")
        result = try daemon.ctl("--json", "list")
        #expect(!result.stdout.contains("new.json"), "\(result.stdout)")
        result = try daemon.ctl("get", "new.json")
        #expect(result.status == 1 && result.stderr.contains("not-found"), "\(result)")
        // A later document's save is the first event: nothing came for new.json.
        try daemon.ctl("set", "later.txt", "--text", "x")
        let event = try client.receive()
        #expect(event["event"]?.stringValue == "saved" && event["doc"]?.stringValue == "later.txt", "\(event)")
        #expect(!FileManager.default.fileExists(atPath: daemon.root + "/new.json"))
        #expect(await daemon.stop() == 0)
    }
}
