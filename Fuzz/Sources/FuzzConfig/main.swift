import Autosave
import FuzzSupport

/// The configuration parser with drop-ins, through `Configuration.load` on real files.
///
/// Input: the main file's text, then each drop-in's, separated by 0x00 (at most 4 drop-ins).
/// Oracles:
/// - A refused configuration is refused whole (`load` throws and nothing is taken; the
///   daemon keeps its running configuration), with every problem pointing at one of the
///   files read and at a line inside it.
/// - An accepted configuration, rendered (what `--check-config` prints) and read again,
///   is the same configuration.
/// - The same files with CRLF line ends mean the same (systemd reads them so).
enum Scratch { static let directory = ScratchDirectory("config") }
let environment = ["STATE_DIRECTORY": "/var/lib/autosaved-fuzz", "RUNTIME_DIRECTORY": "/run/autosaved-fuzz"]

enum Outcome: Equatable {
    case accepted(Configuration)
    case refused([ConfigurationError])
}

/// Drop-ins present in each scratch directory (by path), so that the next input's files
/// replace them in place: the directories stay, only the files change.
nonisolated(unsafe) var dropInsPresent: [String: Int] = [:]

func dropInName(_ main: String, _ index: Int) -> String { main + ".d/\(10 + index)-part.conf" }

func load(_ files: [[UInt8]], in directory: String) -> Outcome {
    let main = directory + "/autosaved.conf"
    let present: Int
    if let known = dropInsPresent[directory] {
        present = known
    } else {
        removeTree(directory)
        mkdir(directory, 0o755)
        present = 0
    }
    writeFile(main, files[0])
    let wanted = files.count - 1
    if wanted > 0 && present == 0 { mkdir(main + ".d", 0o755) }
    for (index, text) in files.dropFirst().enumerated() { writeFile(dropInName(main, index), text) }
    if wanted < present {
        for index in wanted..<present { unlink(dropInName(main, index)) }
        // No drop-in directory at all is another case than an empty one: both are read.
        if wanted == 0 { rmdir(main + ".d") }
    }
    dropInsPresent[directory] = wanted
    do {
        var configuration = try Configuration.load(path: main, required: true, environment: environment)
        configuration.sources = []
        return .accepted(configuration)
    } catch {
        return .refused(error.errors)
    }
}

func lineCount(_ text: [UInt8]) -> Int { text.reduce(1) { $1 == 10 ? $0 + 1 : $0 } }

func fuzzConfig(_ input: [UInt8]) {
    let files = Array(parts(input, limit: 5))
    let directory = Scratch.directory.path + "/a"
    let outcome = load(files, in: directory)
    switch outcome {
    case .refused(let errors):
        check(!errors.isEmpty, "refused without a problem")
        let names =
            [directory + "/autosaved.conf"]
            + files.dropFirst().indices.map { directory + "/autosaved.conf.d/\(9 + $0)-part.conf" }
        let lines = files.map(lineCount)
        for error in errors {
            guard let index = names.firstIndex(of: error.file) else { fail("a problem in an unknown file: \(error)") }
            if let line = error.line {
                check(line >= 1 && line <= lines[index], "a problem outside its file's lines: \(error)")
            }
        }
    case .accepted(let configuration):
        let rendered = Array(configuration.rendered.utf8)
        switch load([rendered], in: Scratch.directory.path + "/b") {
        case .refused(let errors):
            fail(
                "the rendered configuration is refused: \(errors)\ninput: \(show(input))\nrendered:\n\(configuration.rendered)"
            )
        case .accepted(let again):
            check(
                again == configuration,
                "the rendered configuration reads as another\ninput: \(show(input))\nrendered:\n\(configuration.rendered)\nread again:\n\(again.rendered)"
            )
        }
    }
    if !input.contains(13) {
        var crlf: [[UInt8]] = []
        for file in files {
            crlf.append(Array(file.split(separator: 10, omittingEmptySubsequences: false).joined(separator: [13, 10])))
        }
        let other = load(crlf, in: Scratch.directory.path + "/c")
        switch (outcome, other) {
        case (.accepted(let a), .accepted(let b)):
            check(a == b, "CRLF line ends read as another configuration: \(show(input))")
        case (.refused(let a), .refused(let b)):
            check(
                a.map(\.line) == b.map(\.line),
                "CRLF line ends give other problems: \(show(input))\nLF: \(a)\nCRLF: \(b)")
        default:
            fail("CRLF line ends change whether the configuration is accepted: \(show(input))\n\(outcome)\n\(other)")
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzConfig(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
