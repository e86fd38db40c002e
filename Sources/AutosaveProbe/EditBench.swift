import Autosave
import Foundation
import Logging

/// Edit latency on the store while a large document is being saved, beside the same
/// edits with no save running; printed as a Markdown table.
enum EditBench {
    struct Samples {
        var nanoseconds: [UInt64] = []
        func percentile(_ p: Double) -> Double {
            let sorted = nanoseconds.sorted()
            guard !sorted.isEmpty else { return 0 }
            return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1000
        }
    }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    static func run(root: String, megabytes: Int) async -> Int32 {
        var configuration = Configuration(environment: [:])
        configuration.root = root
        configuration.quietPeriod = .seconds(3600)
        configuration.maxDelay = .seconds(3600)
        let store = DocumentStore(configuration: configuration, log: Logger(level: .error))
        let scheduler = Task { await store.runScheduler() }
        defer { scheduler.cancel() }
        do {
            for i in 0..<100 { try await store.apply(.setText("small \(i)\n"), to: "small/\(i).txt", create: true) }
            try await store.saveAll(wait: true)
            let big = String(repeating: "0123456789abcdef", count: megabytes * 65536)
            try await store.apply(.setText(big), to: "big.txt", create: true)

            func edits(_ count: Int, while condition: () async -> Bool = { true }) async throws -> Samples {
                var samples = Samples()
                var i = 0
                while i < count, await condition() {
                    let start = now()
                    try await store.apply(.append("line \(i)\n"), to: "small/\(i % 100).txt")
                    samples.nanoseconds.append(now() - start)
                    i += 1
                }
                return samples
            }

            // From another thread (the global pool): each call hops to the store's thread and back.
            let remote = try await edits(20_000)
            // From a task that prefers the store's thread, as the control socket's connections do.
            let (idle, during, saveMs) = try await withTaskExecutorPreference(store.taskExecutor) {
                let idle = try await edits(20_000)
                let saveStart = now()
                try await store.save("big.txt", wait: false)
                var during = Samples()
                while try await store.info("big.txt").state != .clean {
                    during.nanoseconds += try await edits(200).nanoseconds
                }
                return (idle, during, Double(now() - saveStart) / 1e6)
            }

            // An edit to the big document itself while it is being saved: the first one
            // copies the value the save still holds (copy-on-write).
            try await store.apply(.append("more\n"), to: "big.txt")
            try await store.save("big.txt", wait: false)
            while try await store.info("big.txt").state != .saving { await Task.yield() }
            let start = now()
            try await store.apply(.append("during\n"), to: "big.txt")
            let ownEditMs = Double(now() - start) / 1e6
            try await store.saveAll(wait: true)

            print("| edits to small documents | edits | p50 µs | p99 µs |")
            print("|---|---:|---:|---:|")
            print(
                String(
                    format: "| no save running | %d | %.1f | %.1f |", idle.nanoseconds.count, idle.percentile(0.5),
                    idle.percentile(0.99)))
            print(
                String(
                    format: "| while a %d MB document is saved (%.0f ms) | %d | %.1f | %.1f |", megabytes, saveMs,
                    during.nanoseconds.count, during.percentile(0.5), during.percentile(0.99)))
            print(String(format: "| p99 ratio | | | %.2f× |", during.percentile(0.99) / idle.percentile(0.99)))
            print(
                String(
                    format: "| no save running, caller on another thread | %d | %.1f | %.1f |",
                    remote.nanoseconds.count, remote.percentile(0.5), remote.percentile(0.99)))
            print()
            print(
                String(
                    format:
                        "An edit to the %d MB document itself while it is being saved: %.1f ms (copies the value the save holds).",
                    megabytes, ownEditMs))
            return 0
        } catch {
            FileHandle.standardError.write(Data("bench-edits: \(error)\n".utf8))
            return 1
        }
    }
}
