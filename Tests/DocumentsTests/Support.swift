import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import Testing

/// A fresh directory under the system's temporary directory, removed on deinit.
final class TemporaryDirectory {
    let path: String
    var url: URL { URL(fileURLWithPath: path) }

    init(_ label: String = "documents") {
        var template = Array((NSTemporaryDirectory() + "/\(label)-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func sub(_ name: String) -> String { path + "/" + name }
}

enum Disk {
    static func status(_ path: String) throws -> FileStatus {
        try FileDescriptor.currentWorkingDirectory.status(of: path)
    }

    static func inode(_ path: String) throws -> UInt64 { try status(path).inode }

    static func bytes(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }

    static func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    static func names(in path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    /// Every writer temporary name anywhere under `path`.
    static func temporaries(under path: String) -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: path) else { return [] }
        var found: [String] = []
        while let relative = walker.nextObject() as? String {
            if TemporaryName.isTemporary((relative as NSString).lastPathComponent) { found.append(relative) }
        }
        return found
    }
}

enum Machine {
    static var isRoot: Bool { geteuid() == 0 }

    static func has(_ program: String) -> Bool {
        (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").contains {
            FileManager.default.isExecutableFile(atPath: "\($0)/\(program)")
        }
    }

    /// The directory holding the built products (this test binary sits there too).
    static var productsDirectory: String {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var directory = (exe as NSString).deletingLastPathComponent
        // Under XCTest the binary is inside an .xctest bundle.
        while directory.hasSuffix(".xctest") || directory.contains(".xctest/") {
            directory = (directory as NSString).deletingLastPathComponent
        }
        return directory
    }

    static var probe: String { productsDirectory + "/DocumentsProbe" }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs a program to completion and returns its exit status and output.
    @discardableResult
    static func run(_ program: String, _ arguments: [String]) throws -> Output {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program.hasPrefix("/") ? program : "/usr/bin/env")
        process.arguments = program.hasPrefix("/") ? arguments : [program] + arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Output(
            status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errData, as: UTF8.self))
    }
}

/// A file system mounted for one test (tmpfs or a read-only bind), unmounted on deinit.
final class Mount {
    let path: String

    init(tmpfsOfSize size: String, at path: String) throws {
        self.path = path
        let result = try Machine.run("mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
        guard result.status == 0 else { throw Failure("mount tmpfs: \(result.stderr)") }
    }

    init(readOnlyBindOf source: String, at path: String) throws {
        self.path = path
        var result = try Machine.run("mount", ["--bind", source, path])
        guard result.status == 0 else { throw Failure("mount --bind: \(result.stderr)") }
        result = try Machine.run("mount", ["-o", "remount,bind,ro", path])
        guard result.status == 0 else {
            _ = try? Machine.run("umount", [path])
            throw Failure("remount ro: \(result.stderr)")
        }
    }

    deinit { _ = try? Machine.run("umount", ["-l", path]) }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
