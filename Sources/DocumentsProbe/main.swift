// documents-probe: drives the Documents module from a separate process, for the
// harnesses that need one — saves under strace, saves killed with SIGKILL, recovery,
// and the benchmark script. Not installed; not a user-facing tool.

import Documents
import Foundation
import Posix

/// Writes a line to standard output unbuffered, so a parent waiting for it sees it at once.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("documents-probe: \(message)\n".utf8))
    exit(64)
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard !arguments.isEmpty else {
    fail("usage: documents-probe write|loop-file|loop-package|recover|check-file|check-package|bench-… ARGS")
}
let command = arguments.removeFirst()

@MainActor func option(_ name: String, default value: Int) -> Int {
    guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count, let n = Int(arguments[i + 1]) else {
        return value
    }
    return n
}

@MainActor func flag(_ name: String) -> Bool { arguments.contains(name) }

do {
    switch command {
    case "write":
        // write PATH --size N: one durable save of N bytes.
        let path = arguments[0]
        let size = option("--size", default: 4096)
        try DurableWriter().write(contents: Data(repeating: UInt8(ascii: "x"), count: size), to: path)

    case "loop-file":
        // loop-file PATH: save versions forever, each continuing from the version on disk.
        let path = arguments[0]
        var version = (try? CrashVersions.fileVersion(at: path)) ?? 0
        var announced = false
        while true {
            version += 1
            try DurableWriter().write(contents: CrashVersions.fileContents(version: version), to: path)
            if !announced {
                say("ready")
                announced = true
            }
        }

    case "loop-package":
        // loop-package PATH [--atomic] [--rename-aside] [--members M] [--versions N]: save
        // package versions forever, or N of them, saying "saved V" after each.
        let path = arguments[0]
        let members = option("--members", default: 8)
        let limit = option("--versions", default: 0)
        let options: FileWrapper.WritingOptions = flag("--atomic") ? [.atomic] : []
        let writer = DurableWriter(packageSwap: flag("--rename-aside") ? .renameAside : .exchange)
        var version = 0
        var wrapper: FileWrapper
        if let existing = try? FileWrapper(url: URL(fileURLWithPath: path)),
            let v = try? CrashVersions.packageVersion(at: path)
        {
            wrapper = existing
            version = v
        } else {
            wrapper = CrashVersions.package(version: 0, members: members)
            try writer.write(wrapper, to: path, options: options)
            if limit > 0 { say("saved 0") }
        }
        var announced = false
        while true {
            version += 1
            CrashVersions.advance(wrapper, to: version, members: members)
            try writer.write(wrapper, to: path, options: options, originalContentsPath: path)
            if limit > 0 {
                say("saved \(version)")
                if version >= limit { break }
                continue
            }
            if !announced {
                say("ready")
                announced = true
            }
        }

    case "recover":
        let report = try DurableWriter.recover(at: arguments[0])
        say("removed \(report.removed.count) restored \(report.restored.count)")

    case "check-file":
        say("version \(try CrashVersions.fileVersion(at: arguments[0]))")

    case "check-package":
        say("version \(try CrashVersions.packageVersion(at: arguments[0]))")

    default:
        if command.hasPrefix("bench-") {
            try Bench.run(command, arguments: arguments)
        } else {
            fail("unknown command \(command)")
        }
    }
} catch {
    FileHandle.standardError.write(Data("documents-probe: \(error)\n".utf8))
    exit(1)
}
