import Documents
import Foundation
@preconcurrency import Glibc
import Posix

/// A fresh directory under the system's temporary directory, removed on deinit.
public final class TemporaryDirectory {
    public let path: String
    public var url: URL { URL(fileURLWithPath: path) }

    public init(_ label: String = "documents") {
        var template = Array((NSTemporaryDirectory() + "/\(label)-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    public func sub(_ name: String) -> String { path + "/" + name }
}

public enum Disk {
    public static func status(_ path: String) throws -> FileStatus {
        try FileDescriptor.currentWorkingDirectory.status(of: path)
    }

    public static func inode(_ path: String) throws -> UInt64 { try status(path).inode }

    public static func bytes(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }

    public static func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    public static func names(in path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    /// Fills the file system holding `directory` (with `directory/filler`) until a write fails with ENOSPC.
    public static func fill(_ directory: String) throws {
        let fd = try FileDescriptor.open(directory + "/filler", .writeOnly, options: [.create, .truncate])
        defer { try? fd.close() }
        let chunk = [UInt8](repeating: 0x55, count: 4096)
        while true {
            do { try fd.writeAll(chunk) } catch Errno.noSpace { return }
        }
    }

    /// Every writer temporary name anywhere under `path`.
    public static func temporaries(under path: String) -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: path) else { return [] }
        var found: [String] = []
        while let relative = walker.nextObject() as? String {
            if TemporaryName.isTemporary(PathName.lastComponent(relative)) { found.append(relative) }
        }
        return found
    }
}

public enum Machine {
    public static var isRoot: Bool { geteuid() == 0 }

    public static func has(_ program: String) -> Bool {
        (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").contains {
            FileManager.default.isExecutableFile(atPath: "\($0)/\(program)")
        }
    }

    /// The directory holding the built products (this test binary sits there too).
    public static var productsDirectory: String {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var directory = PathName.parent(exe)
        // Under XCTest the binary is inside an .xctest bundle.
        while directory.hasSuffix(".xctest") || directory.contains(".xctest/") {
            directory = PathName.parent(directory)
        }
        return directory
    }

    public static var probe: String { productsDirectory + "/DocumentsProbe" }

    /// The sanitizer this test binary (and so every product beside it) was built with:
    /// `"thread"`, `"address"`, or `nil`. Known from the sanitizer runtime's entry point,
    /// which a sanitized binary exports.
    public static let sanitizer: String? = {
        let program = dlopen(nil, RTLD_NOW)
        defer { if let program { dlclose(program) } }
        if dlsym(program, "__tsan_init") != nil { return "thread" }
        if dlsym(program, "__asan_init") != nil { return "address" }
        return nil
    }()

    /// Whether the products run without a sanitizer, for `.enabled(if:)` on the tests that
    /// cannot run under one (the reason goes with it).
    public static var isUnsanitized: Bool { sanitizer == nil }

    /// A built product of this package, by name.
    public static func product(_ name: String) -> String { productsDirectory + "/" + name }

    public struct Output: CustomStringConvertible {
        public var status: Int32
        public var stdout: String
        public var stderr: String

        public init(status: Int32, stdout: String, stderr: String) {
            self.status = status
            self.stdout = stdout
            self.stderr = stderr
        }

        public var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
    }

    /// Reads a pipe to its end and closes it.
    ///
    /// Closed here, not left to the handle's deinit: a `Process` whose exit Foundation has
    /// not noticed keeps its pipes, and this process starts hundreds of children. Past about
    /// 1,350 open descriptors Foundation's `Process.run` can crash: it copies each
    /// `/proc/self/fd` entry's whole 256-byte name, and the last entry of a full `readdir`
    /// buffer ends less than that before the end of the allocation.
    public static func readToEnd(_ pipe: Pipe) -> Data {
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        try? pipe.fileHandleForReading.close()
        return data
    }

    /// How many descriptors this process has open.
    public static var openDescriptors: Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }

    /// Throws, naming the count, when this process holds so many descriptors that
    /// Foundation's `Process.run` may crash (see `readToEnd`): a leak in a test shows as
    /// that test's failure instead of a crash of the whole run.
    public static func checkDescriptors() throws {
        let open = openDescriptors
        guard open < 1000 else {
            throw Failure("this test process has \(open) descriptors open: a test leaks them")
        }
    }

    /// Runs a program to completion and returns its exit status and output.
    @discardableResult
    public static func run(_ program: String, _ arguments: [String]) throws -> Output {
        try checkDescriptors()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program.hasPrefix("/") ? program : "/usr/bin/env")
        process.arguments = program.hasPrefix("/") ? arguments : [program] + arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = readToEnd(out)
        let errData = readToEnd(err)
        process.waitUntilExit()
        return Output(
            status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errData, as: UTF8.self))
    }
}

/// A file system mounted for one test (tmpfs or a read-only bind), unmounted on deinit.
public final class Mount {
    public let path: String

    public init(tmpfsOfSize size: String, at path: String) throws {
        self.path = path
        let result = try Machine.run("mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
        guard result.status == 0 else { throw Failure("mount tmpfs: \(result.stderr)") }
    }

    /// A ramfs: it keeps no extended attributes (`ENOTSUP`), where ext4 and tmpfs do.
    public init(ramfsAt path: String) throws {
        self.path = path
        let result = try Machine.run("mount", ["-t", "ramfs", "ramfs", path])
        guard result.status == 0 else { throw Failure("mount ramfs: \(result.stderr)") }
    }

    public init(readOnlyBindOf source: String, at path: String) throws {
        self.path = path
        var result = try Machine.run("mount", ["--bind", source, path])
        guard result.status == 0 else { throw Failure("mount --bind: \(result.stderr)") }
        result = try Machine.run("mount", ["-o", "remount,bind,ro", path])
        guard result.status == 0 else {
            _ = try? Machine.run("umount", [path])
            throw Failure("remount ro: \(result.stderr)")
        }
    }

    /// Remounts a read-only bind mount writable.
    public func makeWritable() throws {
        let result = try Machine.run("mount", ["-o", "remount,bind,rw", path])
        guard result.status == 0 else { throw Failure("remount rw: \(result.stderr)") }
    }

    /// Remounts a bind mount read-only.
    public func makeReadOnly() throws {
        let result = try Machine.run("mount", ["-o", "remount,bind,ro", path])
        guard result.status == 0 else { throw Failure("remount ro: \(result.stderr)") }
    }

    deinit { _ = try? Machine.run("umount", ["-l", path]) }
}

public struct Failure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
