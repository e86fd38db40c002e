@_exported import Glibc

/// libFuzzer's driver: parses its own flags from the command line and calls `callback`
/// with each input (from `compiler-rt/lib/fuzzer/FuzzerInterface.h`).
@_silgen_name("LLVMFuzzerRunDriver")
private func llvmFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32

/// Runs libFuzzer over `callback`; what each target's entry point returns.
public func runFuzzer(
    _ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32 {
    var count = argc
    var arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return llvmFuzzerRunDriver(&count, &arguments, callback)
}

/// The input as an array (libFuzzer passes a null pointer for the empty input).
public func bytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

/// An oracle failure: prints what disagreed and aborts, so libFuzzer keeps the input as a crash.
public func fail(_ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) -> Never {
    let text = "ORACLE FAILURE (\(file):\(line)): \(message())\n"
    var bytes = Array(text.utf8)
    _ = write(2, &bytes, bytes.count)
    abort()
}

public func check(
    _ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line
) {
    if !condition { fail(message(), file: file, line: line) }
}

/// The input's parts between 0x00 bytes (the separator the seed generator uses).
public func parts(_ input: [UInt8], limit: Int = .max) -> [[UInt8]] {
    input.split(separator: 0, maxSplits: limit - 1, omittingEmptySubsequences: false).map(Array.init)
}

/// Reads a structured input from the front: bytes, small numbers, strings; zeros once it runs out.
public struct InputReader {
    var bytes: [UInt8]
    var index = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var isAtEnd: Bool { index >= bytes.count }

    public mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    public mutating func bytes(upTo limit: Int) -> [UInt8] {
        let count = min(Int(byte()) % (limit + 1), bytes.count - min(index, bytes.count))
        defer { index += count }
        return Array(bytes[index..<index + count])
    }

    public mutating func uint16() -> UInt16 { UInt16(byte()) | UInt16(byte()) << 8 }
}

/// A fresh directory under /dev/shm (tmpfs: the targets that touch files stay fast), removed by `remove`.
/// Its name carries the fuzzer's process ID, so that `scripts/fuzz` removes only the
/// directories of fuzzers that have exited, never those of another run going on beside.
public struct ScratchDirectory: Sendable {
    public let path: String

    public init(_ label: String) {
        var template = Array("/dev/shm/autosaved-fuzz-\(label)-\(getpid())-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        check(made != nil, "mkdtemp failed: errno \(errno)")
        path = String(cString: made!)
    }

    /// Removes everything below the directory (and the directory itself when `all`).
    public func clear(all: Bool = false) {
        removeTree(path, keepingTop: !all)
    }
}

/// Removes a tree without following symbolic links (names are bytes: any name goes).
public func removeTree(_ path: String, keepingTop: Bool = false) {
    removeTree(bytes: Array(path.utf8), keepingTop: keepingTop)
}

private func withCString<R>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
    (path + [0]).withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) } }
}

private func removeTree(bytes path: [UInt8], keepingTop: Bool) {
    var status = stat()
    guard withCString(path, { lstat($0, &status) }) == 0 else { return }
    if status.st_mode & S_IFMT == S_IFDIR {
        // A directory left unreadable or unwritable is made accessible first (only then:
        // a chmod of every directory would double the calls).
        var dir = withCString(path, { opendir($0) })
        if dir == nil || status.st_mode & 0o700 != 0o700 {
            if let opened = dir { closedir(opened) }
            _ = withCString(path) { chmod($0, 0o700) }
            dir = withCString(path, { opendir($0) })
        }
        if let dir {
            var names: [[UInt8]] = []
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
                if name != [0x2E] && name != [0x2E, 0x2E] { names.append(name) }
            }
            closedir(dir)
            for name in names { removeTree(bytes: path + [UInt8(ascii: "/")] + name, keepingTop: false) }
        }
        if !keepingTop { _ = withCString(path) { rmdir($0) } }
    } else if !keepingTop {
        _ = withCString(path) { unlink($0) }
    }
}

/// Writes `bytes` to a new file at `path`.
public func writeFile(_ path: String, _ bytes: [UInt8]) {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    check(fd >= 0, "cannot create \(path): errno \(errno)")
    var written = 0
    while written < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, bytes.count - written) }
        check(n > 0, "cannot write \(path): errno \(errno)")
        written += n
    }
    close(fd)
}

/// Shown in failure messages: printable ASCII as it is, other bytes as `\xNN`.
public func show(_ bytes: some Sequence<UInt8>) -> String {
    var out = ""
    for byte in bytes {
        if byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\\") {
            out.append(Character(Unicode.Scalar(byte)))
        } else {
            let hex = String(byte, radix: 16)
            out += "\\x" + (hex.count == 1 ? "0" + hex : hex)
        }
    }
    return out
}
