import Documents
import Foundation
import FuzzSupport

/// The FileWrapper reader over generated directory trees.
///
/// The input is a small program that builds a tree (files with contents, directories,
/// symbolic links, entries with the writer's temporary names, FIFOs); the target makes it
/// under /dev/shm with plain system calls and reads it with `FileWrapper(url:options:)`,
/// immediately or lazily. Oracles: a tree with a FIFO (neither file, directory nor link)
/// is refused; any other tree reads as exactly what was made, minus temporary entries;
/// the wrapper matches the tree it was read from; and written elsewhere, it makes the same
/// tree again (contents, link destinations byte for byte).
indirect enum Node: Equatable {
    case file([UInt8])
    case directory([[UInt8]: Node])
    case link([UInt8])
    case fifo
}

enum Scratch { static let directory = ScratchDirectory("filewrapper") }

func cPath(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> Int32) -> Int32 {
    (bytes + [0]).withUnsafeBufferPointer { buffer in
        buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
    }
}

func make(_ node: Node, at path: [UInt8]) {
    switch node {
    case .file(let contents):
        let fd = cPath(path) { open($0, O_WRONLY | O_CREAT | O_EXCL, 0o644) }
        check(fd >= 0, "cannot create \(show(path)): errno \(errno)")
        if !contents.isEmpty {
            let n = contents.withUnsafeBytes { write(fd, $0.baseAddress!, contents.count) }
            check(n == contents.count, "short write")
        }
        close(fd)
    case .directory(let children):
        check(cPath(path) { mkdir($0, 0o755) } == 0, "mkdir \(show(path)): errno \(errno)")
        for (name, child) in children { make(child, at: path + [UInt8(ascii: "/")] + name) }
    case .link(let destination):
        check(cPath(destination) { target in cPath(path) { symlink(target, $0) } } == 0, "symlink: errno \(errno)")
    case .fifo:
        check(cPath(path) { mkfifo($0, 0o644) } == 0, "mkfifo: errno \(errno)")
    }
}

/// What a tree on disk holds, read with plain system calls.
func readBack(_ path: [UInt8]) -> Node {
    var status = stat()
    check(cPath(path) { lstat($0, &status) } == 0, "lstat \(show(path)): errno \(errno)")
    switch status.st_mode & S_IFMT {
    case S_IFREG:
        let fd = cPath(path) { open($0, O_RDONLY) }
        check(fd >= 0, "open \(show(path))")
        var contents: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, 4096) }
            check(n >= 0, "read")
            if n == 0 { break }
            contents += buffer[..<n]
        }
        close(fd)
        return .file(contents)
    case S_IFDIR:
        var children: [[UInt8]: Node] = [:]
        let dir = (path + [0]).withUnsafeBufferPointer {
            $0.withMemoryRebound(to: CChar.self) { opendir($0.baseAddress!) }
        }
        guard let dir else { fail("opendir \(show(path)): errno \(errno)") }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name != [0x2E] && name != [0x2E, 0x2E] { names.append(name) }
        }
        closedir(dir)
        for name in names { children[name] = readBack(path + [UInt8(ascii: "/")] + name) }
        return .directory(children)
    case S_IFLNK:
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = cPath(path) { p in
            buffer.withUnsafeMutableBytes {
                Int32(readlink(p, $0.baseAddress!.assumingMemoryBound(to: CChar.self), 4096))
            }
        }
        check(n >= 0, "readlink")
        return .link(Array(buffer[..<Int(n)]))
    default:
        return .fifo
    }
}

func isTemporary(_ name: [UInt8]) -> Bool {
    guard let string = String(validating: name, as: UTF8.self) else { return false }
    return TemporaryName.isTemporary(string)
}

/// The tree without the writer's temporary entries (which readers skip).
func visible(_ node: Node) -> Node {
    guard case .directory(let children) = node else { return node }
    return .directory(children.filter { !isTemporary($0.key) }.mapValues(visible))
}

func contains(_ node: Node, where test: (Node) -> Bool) -> Bool {
    if test(node) { return true }
    guard case .directory(let children) = node else { return false }
    return children.values.contains { contains($0, where: test) }
}

/// Whether a name or a link destination is not UTF-8: such a tree may be refused (a
/// String cannot hold it), but never read as something else.
func hasBadName(_ node: Node) -> Bool {
    switch node {
    case .link(let destination): return String(validating: destination, as: UTF8.self) == nil
    case .directory(let children):
        return children.contains { String(validating: $0.key, as: UTF8.self) == nil || hasBadName($0.value) }
    default: return false
    }
}

func compare(_ wrapper: FileWrapper, _ node: Node, _ path: String) {
    switch node {
    case .file(let contents):
        check(wrapper.isRegularFile, "\(path) should be a file")
        guard let data = wrapper.regularFileContents else { fail("\(path): no contents") }
        check(Array(data) == contents, "\(path): contents differ")
    case .link:
        check(wrapper.isSymbolicLink, "\(path) should be a link")
    case .directory(let children):
        check(wrapper.isDirectory, "\(path) should be a directory")
        let wrappers = wrapper.fileWrappers ?? [:]
        check(
            Set(wrappers.keys.map { Array($0.utf8) }) == Set(children.keys),
            "\(path): children \(wrappers.keys.sorted()) instead of \(children.keys.map { show($0) }.sorted())")
        for (name, child) in children {
            guard let childWrapper = wrappers[String(decoding: name, as: UTF8.self)] else { continue }
            compare(childWrapper, child, path + "/" + show(name))
        }
    case .fifo:
        fail("\(path): a FIFO was read")
    }
}

/// Input: a program. Each step's first byte picks what to make in the current directory:
/// 0 a file (name, contents), 1 a directory (entered), 2 back up one level, 3 a symbolic
/// link (name, destination), 4 a file with a temporary name, 5 a FIFO; names are bytes
/// without `/` and NUL (valid UTF-8 when the step's byte has bit 3 clear).
func buildTree(_ input: [UInt8]) -> (Node, immediate: Bool) {
    var reader = InputReader(input)
    let immediate = reader.byte() & 1 == 0
    var stack: [([UInt8], [[UInt8]: Node])] = [([], [:])]
    var counter = 0
    func name(_ step: UInt8) -> [UInt8] {
        counter += 1
        var raw = reader.bytes(upTo: 12).filter { $0 != 0 && $0 != UInt8(ascii: "/") }
        if step & 8 == 0 { raw = Array(String(decoding: raw, as: UTF8.self).utf8) }
        if raw.isEmpty || raw == [0x2E] || raw == [0x2E, 0x2E] { raw = Array("n\(counter)".utf8) }
        return raw
    }
    var steps = 0
    while !reader.isAtEnd && steps < 40 {
        steps += 1
        let step = reader.byte()
        switch step % 8 {
        case 0, 6:
            let n = name(step)
            stack[stack.count - 1].1[n] = .file(reader.bytes(upTo: 200))
        case 1:
            if stack.count < 6 { stack.append((name(step), [:])) }
        case 2, 7:
            if stack.count > 1 {
                let (n, children) = stack.removeLast()
                stack[stack.count - 1].1[n] = .directory(children)
            }
        case 3:
            let n = name(step)
            var destination = reader.bytes(upTo: 30).filter { $0 != 0 }
            if destination.isEmpty { destination = Array("elsewhere".utf8) }
            stack[stack.count - 1].1[n] = .link(destination)
        case 4:
            let n = Array(".\(String(decoding: name(step & ~8), as: UTF8.self)).autosave-\(counter % 10)abcde".utf8)
            stack[stack.count - 1].1[n] = .file(reader.bytes(upTo: 20))
        default:
            stack[stack.count - 1].1[name(step)] = .fifo
        }
    }
    while stack.count > 1 {
        let (n, children) = stack.removeLast()
        stack[stack.count - 1].1[n] = .directory(children)
    }
    return (.directory(stack[0].1), immediate)
}

func fuzzFileWrapper(_ input: [UInt8]) {
    let (tree, immediate) = buildTree(input)
    let base = Scratch.directory.path
    Scratch.directory.clear()
    let root = base + "/tree.package"
    make(tree, at: Array(root.utf8))
    let expected = visible(tree)
    let hasFIFO = contains(expected) { $0 == .fifo }
    let wrapper: FileWrapper
    do {
        wrapper = try FileWrapper(url: URL(fileURLWithPath: root), options: immediate ? [.immediate] : [])
    } catch {
        if hasFIFO || hasBadName(expected) { return }
        fail("a tree of files, directories and links is refused: \(error)\ntree: \(expected)")
    }
    check(!hasFIFO, "a tree with a FIFO was read")
    if hasBadName(expected) {
        fail("a tree with a name or link destination that is not UTF-8 was read: \(expected)")
    }
    compare(wrapper, expected, "tree.package")
    check(
        wrapper.matchesContents(of: URL(fileURLWithPath: root)), "the wrapper does not match the tree it was read from")
    let copy = base + "/copy.package"
    do { try wrapper.write(to: URL(fileURLWithPath: copy), options: [.atomic]) } catch {
        fail("the wrapper cannot be written again: \(error)")
    }
    let written = visible(readBack(Array(copy.utf8)))
    check(written == expected, "written again, the tree differs\nmade: \(expected)\nwritten: \(written)")
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzFileWrapper(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
