import Documents
import Foundation
import Posix

/// Benchmarks printed as Markdown tables, run by `scripts/bench-documents`.
enum Bench {
    static func run(_ command: String, arguments: [String]) throws {
        func value(_ name: String, _ fallback: Int) -> Int {
            guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count, let n = Int(arguments[i + 1]) else {
                return fallback
            }
            return n
        }
        guard let directory = arguments.first, !directory.hasPrefix("--") else {
            throw CrashVersions.Torn(description: "\(command) needs a directory")
        }
        switch command {
        case "bench-file":
            try fileSaves(in: directory, iterations: value("--iterations", 300))
        case "bench-package":
            try packageSaves(
                in: directory, members: value("--members", 10_000), memberSize: value("--member-size", 256),
                iterations: value("--iterations", 50), fullRounds: value("--full-rounds", 5))
        default:
            throw CrashVersions.Torn(description: "unknown benchmark \(command)")
        }
    }

    // MARK: Measuring

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    struct Samples {
        var nanoseconds: [UInt64] = []
        mutating func add(_ start: UInt64) { nanoseconds.append(now() - start) }
        func percentile(_ p: Double) -> Double {
            let sorted = nanoseconds.sorted()
            guard !sorted.isEmpty else { return 0 }
            let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
            return Double(sorted[max(0, index)]) / 1e6
        }
        var mean: Double { Double(nanoseconds.reduce(0, +)) / Double(max(1, nanoseconds.count)) / 1e6 }
    }

    /// `/proc/self/io`: bytes passed to write calls (`wchar`) and bytes sent to storage (`write_bytes`).
    static func io() -> (wchar: Int, writeBytes: Int) {
        let text = (try? String(contentsOfFile: "/proc/self/io", encoding: .utf8)) ?? ""
        var wchar = 0
        var writeBytes = 0
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":")
            guard parts.count == 2, let n = Int(parts[1].trimmingCharacters(in: .whitespaces)) else { continue }
            if parts[0] == "wchar" { wchar = n }
            if parts[0] == "write_bytes" { writeBytes = n }
        }
        return (wchar, writeBytes)
    }

    static func format(_ ms: Double) -> String { String(format: "%.3f", ms) }

    // MARK: Regular files

    /// The bare recipe with no library in between: temp, write, fsync, rename, fsync dir.
    static func bareRecipe(directory: FileDescriptor, name: String, bytes: [UInt8], counter: Int) throws {
        let temporary = ".\(name).bare-\(counter)"
        let fd = try FileDescriptor.open(
            temporary, relativeTo: directory, .writeOnly, options: [.exclusiveCreate, .noFollow],
            permissions: .init(rawValue: 0o644))
        try fd.closeAfter { () throws(Errno) in
            try fd.writeAll(bytes)
            try fd.sync()
        }
        try directory.rename(temporary, to: name)
        try directory.sync()
    }

    static func fileSaves(in path: String, iterations: Int) throws {
        let directory = try FileDescriptor.open(path, options: [.directory])
        defer { try? directory.close() }
        print("| size | recipe | p50 ms | p99 ms | mean ms |")
        print("|---:|---|---:|---:|---:|")
        for size in [4096, 1 << 20] {
            let bytes = [UInt8](repeating: 0x61, count: size)
            let data = Data(bytes)
            var bare = Samples()
            var durable = Samples()
            let count = size > 4096 ? max(iterations / 3, 20) : iterations
            for i in 0..<count {
                // Interleaved so that drift on a shared machine hits both alike.
                var start = now()
                try bareRecipe(directory: directory, name: "bare-\(size)", bytes: bytes, counter: i)
                bare.add(start)
                start = now()
                try DurableWriter().write(contents: data, to: path + "/durable-\(size)")
                durable.add(start)
            }
            let label = size == 4096 ? "4 KiB" : "1 MiB"
            print(
                "| \(label) | bare recipe | \(format(bare.percentile(0.5))) | \(format(bare.percentile(0.99))) | \(format(bare.mean)) |"
            )
            print(
                "| \(label) | DurableWriter | \(format(durable.percentile(0.5))) | \(format(durable.percentile(0.99))) | \(format(durable.mean)) |"
            )
            print(
                "| \(label) | ratio (p50) | \(String(format: "%.2f×", durable.percentile(0.5) / bare.percentile(0.5))) | | |"
            )
        }
    }

    // MARK: Packages

    static func packageSaves(in path: String, members: Int, memberSize: Int, iterations: Int, fullRounds: Int) throws {
        func member(_ i: Int, _ generation: Int) -> Data {
            var data = Data("member \(i) generation \(generation)\n".utf8)
            data.append(Data(repeating: 0x2e, count: max(0, memberSize - data.count)))
            return data
        }
        func fresh(generation: Int) -> FileWrapper {
            var children: [String: FileWrapper] = [:]
            for i in 0..<members { children["m\(i).txt"] = FileWrapper(regularFileWithContents: member(i, generation)) }
            return FileWrapper(directoryWithFileWrappers: children)
        }

        print(
            "| package save (\(members) members of \(memberSize) B, one changed) | p50 ms | p99 ms | wchar / save | write_bytes / save |"
        )
        print("|---|---:|---:|---:|---:|")

        // A single-file save of one member's size is the yardstick; it runs interleaved
        // with the package saves so that drift on a shared machine hits both alike.
        var single = Samples()
        var singleIO = (wchar: 0, writeBytes: 0)
        var rows: [(String, Samples, Int, Int)] = []
        for (label, options) in [("incremental", FileWrapper.WritingOptions()), (".atomic", .atomic)] {
            let packagePath = path + "/\(label == "incremental" ? "inc" : "atomic").pkg"
            let wrapper = fresh(generation: 0)
            try DurableWriter().write(wrapper, to: packagePath, options: options)
            var samples = Samples()
            var written = (wchar: 0, writeBytes: 0)
            for iteration in 1...iterations {
                let index = (iteration * 7919) % members
                let name = "m\(index).txt"
                wrapper.removeFileWrapper(wrapper.fileWrappers![name]!)
                wrapper.addRegularFile(withContents: member(index, iteration), preferredFilename: name)
                var before = io()
                var start = now()
                try DurableWriter().write(wrapper, to: packagePath, options: options, originalContentsPath: packagePath)
                samples.add(start)
                var after = io()
                written.wchar += after.wchar - before.wchar
                written.writeBytes += after.writeBytes - before.writeBytes

                before = io()
                start = now()
                try DurableWriter().write(contents: member(index, iteration), to: path + "/single.txt")
                single.add(start)
                after = io()
                singleIO.wchar += after.wchar - before.wchar
                singleIO.writeBytes += after.writeBytes - before.writeBytes
            }
            rows.append((label, samples, written.wchar / iterations, written.writeBytes / iterations))
        }
        let count = single.nanoseconds.count
        row("single-file save (yardstick)", single, singleIO.wchar / count, singleIO.writeBytes / count)
        for (label, samples, wchar, writeBytes) in rows { row(label, samples, wchar, writeBytes) }

        // A full rewrite: every member written again, as a writer without change tracking must.
        let fullPath = path + "/full.pkg"
        try DurableWriter().write(fresh(generation: 0), to: fullPath, options: .atomic)
        var full = Samples()
        let rounds = max(1, fullRounds)
        let before = io()
        for round in 1...rounds {
            let wrapper = fresh(generation: round)
            let start = now()
            try DurableWriter().write(wrapper, to: fullPath, options: .atomic)
            full.add(start)
        }
        let after = io()
        row(
            "full rewrite", full, (after.wchar - before.wchar) / rounds, (after.writeBytes - before.writeBytes) / rounds
        )
    }

    static func row(_ label: String, _ samples: Samples, _ wchar: Int, _ writeBytes: Int) {
        print(
            "| \(label) | \(format(samples.percentile(0.5))) | \(format(samples.percentile(0.99))) | \(wchar) B | \(writeBytes) B |"
        )
    }
}
