// autosave-probe: the autosaved daemon (the same Daemon.run the executable calls)
// with an in-process driver making edits, for harnesses that need a daemon holding
// unsaved edits before the control socket exists to send them: SIGTERM flushes,
// SIGKILL during saves, the benchmarks. Not installed; not a user-facing tool.

import Autosave
import Foundation
import Logging

exit(await Probe.run())

enum Probe {
    static func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

    /// Self-checking contents: `doc <i> version <v>`, a payload derived from both, `end <v>`.
    static func contents(document: Int, version: Int) -> String {
        let payload = String(repeating: "\(document)-\(version);", count: 50 + (document * 31 + version * 17) % 400)
        return "doc \(document) version \(version)\n\(payload)\nend \(version)\n"
    }

    static func run() async -> Int32 {
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let mode = arguments.first else {
            FileHandle.standardError.write(
                Data("usage: autosave-probe dirty N|save-loop N|bench-… [autosaved options]\n".utf8))
            return 64
        }
        arguments.removeFirst()
        let count = arguments.first.flatMap(Int.init) ?? 1
        if arguments.first.flatMap(Int.init) != nil { arguments.removeFirst() }

        switch mode {
        case "trim-check":
            // The memory trimmer on this process's own heap (a test's process must not have
            // its heap trimmed under it): 40 MB in 4,000-byte blocks, all but every 64th
            // freed, one trim; prints what it did.
            var blocks: [UnsafeMutableRawPointer] = []
            for _ in 0..<10_000 {
                let block = malloc(4000)!
                memset(block, 1, 4000)
                blocks.append(block)
            }
            for (index, block) in blocks.enumerated() where index % 64 != 63 { free(block) }
            let before = MemoryTrimmer.residentBytes()
            let trimmer = MemoryTrimmer(minimumFree: count)
            let trimmed = trimmer.trimIfWorthIt()
            let after = MemoryTrimmer.residentBytes()
            let totals = trimmer.totals
            say(
                "trimmed \(trimmed) before \(before) after \(after) trims \(totals.trims) released \(totals.released) summary \(trimmer.summary)"
            )
            for (index, block) in blocks.enumerated() where index % 64 == 63 { free(block) }
            return 0
        case "dirty":
            // N documents with unsaved edits, then "ready N"; the daemon runs until a signal.
            return
                await Daemon.run(arguments: arguments) { store in
                    for i in 0..<count {
                        _ = try? await store.apply(
                            .setText(contents(document: i, version: 1)), to: "dirty/doc\(i).txt", create: true)
                    }
                    let unsaved = await store.status().unsaved
                    say("ready \(unsaved)")
                }

        case "save-loop":
            // N documents edited and saved durably in a loop, forever, continuing from what is on
            // disk; "ready" after the first round is durable.
            return
                await Daemon.run(arguments: arguments) { store in
                    Task {
                        var version = 1
                        for i in 0..<count {
                            if case .text(let text)? = try? await store.read("loop/doc\(i).txt"),
                                let line = text.split(separator: "\n").first,
                                let v = Int(line.split(separator: " ").last ?? "")
                            {
                                version = max(version, v + 1)
                            }
                        }
                        var announced = false
                        while true {
                            for i in 0..<count {
                                _ = try? await store.apply(
                                    .setText(contents(document: i, version: version)), to: "loop/doc\(i).txt",
                                    create: true)
                            }
                            try? await store.saveAll(wait: true)
                            if !announced {
                                say("ready")
                                announced = true
                            }
                            version += 1
                        }
                    }
                }

        case "hang":
            // hang N: the daemon, whose store stops answering N seconds after start-up
            // (an edit that never returns blocks its actor): for the watchdog test.
            let seconds = count
            return await Daemon.run(arguments: arguments) { store in
                _ = try? await store.apply(.setText("x"), to: "hang.txt", create: true)
                say("ready")
                Task {
                    try? await Task.sleep(for: .seconds(seconds))
                    say("hanging")
                    _ = try? await store.modify("hang.txt", as: PlainTextDocument.self) { _ in
                        while true { sleep(1) }
                    }
                }
            }

        case "bench-watch":
            // bench-watch DOCUMENTS DIR: rename-over save → reloaded content, p50/p99.
            guard let directory = arguments.first else { return 64 }
            return await WatchBench.run(root: directory, documents: count, samples: 300)

        case "bench-edits":
            // bench-edits MB DIR: edit latency with and without a save of an MB-megabyte document in flight.
            guard let directory = arguments.first else { return 64 }
            return await EditBench.run(root: directory, megabytes: count)

        default:
            FileHandle.standardError.write(Data("autosave-probe: unknown mode \(mode)\n".utf8))
            return 64
        }
    }
}
