import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// `autosavectl completion bash|zsh|fish`, loaded into the real shells from Debian and
/// asked what they offer, against a running daemon and an unreachable one.
@Suite("Shell completion", .serialized)
final class CompletionTests {
    let directory = TemporaryDirectory("completion")
    var environment = ProcessInfo.processInfo.environment
    var daemon: DaemonProcess?

    init() throws {
        environment["XDG_RUNTIME_DIR"] = directory.sub("runtime")
        environment["PATH"] = Machine.productsDirectory + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment["HOME"] = directory.path
        environment.removeValue(forKey: "NOTIFY_SOCKET")
        for name in ["notes/a.txt", "notes/b.txt", "other.txt"] {
            try FileManager.default.createDirectory(
                atPath: PathName.parent(directory.sub("root/" + name)), withIntermediateDirectories: true)
            try Disk.write("x\n", to: directory.sub("root/" + name))
        }
        try FileManager.default.createDirectory(
            atPath: directory.sub("runtime/autosaved"), withIntermediateDirectories: true)
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Control]\nSocket=\(directory.sub("runtime/autosaved/control.sock"))\n",
            to: directory.sub("autosaved.conf"))
    }

    deinit {
        daemon?.signal(SIGTERM)
        daemon?.process.waitUntilExit()
    }

    /// The daemon, on the default socket of this test's user.
    func startDaemon() async throws {
        let started = try DaemonProcess(
            Machine.product("autosaved"), ["--config", directory.sub("autosaved.conf")], environment: environment)
        daemon = started
        try #require(await started.waitForLine(containing: "started: 3 documents") != nil)
    }

    /// What bash with bash-completion offers for `line` (the word being completed is the
    /// last one; a trailing space starts a new one): the function `complete -p` names is
    /// called as readline would.
    func bash(_ line: String) throws -> (offered: [String], stderr: String) {
        let script = """
            source /usr/share/bash-completion/bash_completion
            source <(autosavectl completion bash)
            function=$(complete -p autosavectl | sed -E 's/.*-F ([^ ]+).*/\\1/')
            COMP_LINE="$1" COMP_POINT=${#1}
            read -ra COMP_WORDS <<< "$1"
            [[ $1 == *" " ]] && COMP_WORDS+=("")
            COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
            "$function" autosavectl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let result = try Shell.execute(
            "/bin/bash", ["--norc", "--noprofile", "-c", script, "bash", line], environment: environment)
        #expect(result.status == 0, "\(result)")
        return (result.stdout.split(separator: "\n").map(String.init).sorted(), result.stderr)
    }

    /// What fish offers for `line` (`complete -C`, fish's own completion engine).
    func fish(_ line: String) throws -> (offered: [String], stderr: String) {
        let result = try Shell.execute(
            "fish", ["--no-config", "-c", "autosavectl completion fish | source; complete -C $argv[1]", line],
            environment: environment)
        #expect(result.status == 0, "\(result)")
        let offered = result.stdout.split(separator: "\n").map { String($0.split(separator: "\t")[0]) }
        return (offered.sorted(), result.stderr)
    }

    /// What zsh lists for `line`: an interactive zsh with compinit on a pseudo-terminal
    /// (zsh's zpty), the line typed and Ctrl-D (list the choices) pressed.
    func zsh(_ line: String) throws -> String {
        let driver = directory.sub("zsh-driver")
        try Disk.write(
            """
            zmodload zsh/zpty
            zpty z zsh -f -i
            out=""
            readuntil() {
                local chunk
                while [[ $out != $~1 ]]; do
                    zpty -r -t z chunk && out+=$chunk || sleep 0.02
                    (( SECONDS > 30 )) && { print -r -- "timed out: $out"; exit 1 }
                done
            }
            zpty -w z 'PS1="READY> "; autoload -Uz compinit; compinit -u -D; source <(autosavectl completion zsh); print -- SET''UP'
            readuntil '*SETUP*READY> *'
            out=""
            zpty -n -w z "$1"$'\\x04'
            zpty -n -w z $'\\x15'"print -- EN''D"$'\\n'
            readuntil '*END'$'\\r''*'
            print -r -- "${out%%END$'\\r'*}"
            zpty -d z
            """, to: driver)
        var environment = environment
        environment["TERM"] = "xterm"
        let result = try Shell.execute("zsh", ["-f", driver, line], environment: environment)
        #expect(result.status == 0, "\(result)")
        // What the terminal showed, without its escapes and carriage returns.
        return result.stdout.replacing(#/\x1B\[[0-9;?]*[A-Za-z]/#, with: "").replacingOccurrences(of: "\r", with: "")
    }

    static var bashAvailable: Bool {
        FileManager.default.fileExists(atPath: "/usr/share/bash-completion/bash_completion")
    }

    @Test(
        "bash (with bash-completion): subcommands, options, the daemon's documents; nothing, quietly, without a daemon",
        .enabled(if: bashAvailable, "needs bash-completion"))
    func bashCompletion() async throws {
        #expect(try bash("autosavectl sa").offered == ["save", "save-all"])
        #expect(try bash("autosavectl get --me").offered == ["--member", "--members"])
        #expect(try bash("autosavectl completion ").offered == ["bash", "fish", "zsh"])
        let unreachable = try bash("autosavectl get no")
        #expect(unreachable.offered.isEmpty && unreachable.stderr.isEmpty, "\(unreachable)")
        try await startDaemon()
        #expect(try bash("autosavectl get no").offered == ["notes/a.txt", "notes/b.txt"])
        #expect(try bash("autosavectl save ").offered == ["notes/a.txt", "notes/b.txt", "other.txt"])
        let socket = directory.sub("runtime/autosaved/control.sock")
        #expect(try bash("autosavectl --socket \(socket) close o").offered == ["other.txt"])
        #expect(try bash("autosavectl --socket /nonexistent/control.sock get no").offered.isEmpty)
    }

    @Test(
        "zsh (compinit, a real Ctrl-D listing): subcommands with their descriptions, the daemon's documents",
        .enabled(if: Machine.has("zsh"), "needs zsh"))
    func zshCompletion() async throws {
        let subcommands = try zsh("autosavectl sa")
        #expect(subcommands.contains(#/save-all +-- Save every document/#), "\(subcommands)")
        #expect(subcommands.contains(#/(^|\n)save +-- Save a document now/#), "\(subcommands)")
        #expect(!subcommands.contains("status"))
        let nothing = try zsh("autosavectl get no")
        #expect(!nothing.contains("notes/") && !nothing.contains("autosavectl:"), "\(nothing)")
        try await startDaemon()
        let documents = try zsh("autosavectl get no")
        #expect(documents.contains("notes/a.txt") && documents.contains("notes/b.txt"), "\(documents)")
        #expect(!documents.contains("other.txt"), "\(documents)")
    }

    @Test(
        "fish (complete -C): subcommands, options, the daemon's documents; nothing, quietly, without a daemon",
        .enabled(if: Machine.has("fish"), "needs fish"))
    func fishCompletion() async throws {
        #expect(try fish("autosavectl sa").offered == ["save", "save-all"])
        #expect(try fish("autosavectl get --me").offered == ["--member", "--members"])
        let unreachable = try fish("autosavectl get no")
        #expect(unreachable.offered.isEmpty && unreachable.stderr.isEmpty, "\(unreachable)")
        try await startDaemon()
        #expect(try fish("autosavectl get no").offered == ["notes/a.txt", "notes/b.txt"])
        let socket = directory.sub("runtime/autosaved/control.sock")
        #expect(try fish("autosavectl --socket \(socket) close o").offered == ["other.txt"])
    }

    @Test("completion refuses a shell it does not know, with a usage error")
    func unknownShell() throws {
        let result = try Machine.run(Machine.product("autosavectl"), ["completion", "tcsh"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("bash, zsh or fish"))
    }
}
