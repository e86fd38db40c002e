import Autosave
import Foundation
import Logging
import Posix

/// Time from another program's rename-over save to the reloaded content being visible
/// in the store, with few and with many watched documents.
enum WatchBench {
    static func run(root: String, documents: Int, samples: Int) async -> Int32 {
        var configuration = Configuration(environment: [:])
        configuration.root = root
        configuration.quietPeriod = .seconds(3600)
        configuration.maxDelay = .seconds(3600)
        do {
            for i in 0..<documents {
                let directory = root + "/d\(i % 1000)"
                if i < 1000 {
                    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                }
                try Data("v0\n".utf8).write(to: URL(fileURLWithPath: directory + "/n\(i).txt"))
            }
            let store = DocumentStore(configuration: configuration, log: Logger(level: .error))
            await store.openAll()
            try await store.startWatching()
            let events = await store.events()
            var iterator = events.makeAsyncIterator()
            var latencies: [Double] = []
            for sample in 0..<samples {
                let i = (sample * 7919) % documents
                let path = "d\(i % 1000)/n\(i).txt"
                let full = root + "/" + path
                let text = "sample \(sample)\n"
                try Data(text.utf8).write(to: URL(fileURLWithPath: full + ".tmp"))
                let start = DispatchTime.now().uptimeNanoseconds
                try FileDescriptor.currentWorkingDirectory.rename(full + ".tmp", to: full)
                // The temp file itself is opened and closed as documents come and go; wait for the reload.
                while let event = await iterator.next() {
                    if case .changedOnDisk(path) = event { break }
                }
                let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
                guard case .text(text)? = try? await store.read(path) else {
                    FileHandle.standardError.write(Data("bench-watch: \(path) does not hold the new text\n".utf8))
                    return 1
                }
                latencies.append(elapsed)
            }
            await store.stopWatching()
            latencies.sort()
            let p50 = latencies[latencies.count / 2]
            let p99 = latencies[min(latencies.count - 1, Int(Double(latencies.count) * 0.99))]
            print(String(format: "| %d | %d | %.2f | %.2f |", documents, samples, p50, p99))
            return 0
        } catch {
            FileHandle.standardError.write(Data("bench-watch: \(error)\n".utf8))
            return 1
        }
    }
}
