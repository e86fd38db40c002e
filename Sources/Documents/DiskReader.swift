import Foundation
import Posix
import Synchronization

/// Reads nodes from disk into wrappers and compares wrappers with disk.
enum DiskReader {
    struct ReadNode {
        var node: FileWrapper.Node
        var status: FileStatus
        var sync: SyncRecord?
    }

    /// Reads the node at `path`; with `root`, its directory is opened beneath `root`
    /// through no symbolic link (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`).
    static func readNode(at path: String, immediate: Bool, beneath root: String? = nil) throws -> ReadNode {
        let parentPath = PathName.parent(path)
        let name = PathName.lastComponent(path)
        let parent = try open(directory: parentPath.isEmpty ? "." : parentPath, for: path, beneath: root)
        return try parent.closeAfter { try readNode(name: name, in: parent, path: path, immediate: immediate) }
    }

    private static func open(directory: String, for path: String, beneath root: String?) throws -> FileDescriptor {
        do throws(Errno) {
            guard let root else { return try FileDescriptor.open(directory, .readOnly, options: [.directory]) }
            guard let relative = PathName.relative(directory, to: root) else { throw Errno.crossDevice }
            let base = try FileDescriptor.open(root, .readOnly, options: [.directory])
            return try base.closeAfter { () throws(Errno) in
                try FileDescriptor.openBeneath(relative, relativeTo: base, options: [.directory], noSymlinks: true)
            }
        } catch {
            throw DocumentError(operation: .openDirectory, path: path, errno: error)
        }
    }

    /// `name` with every scalar outside ASCII spelled `\u{…}`: two names that print alike
    /// told apart.
    static func scalars(_ name: String) -> String {
        var text = ""
        for scalar in name.unicodeScalars {
            if scalar.isASCII {
                text.unicodeScalars.append(scalar)
            } else {
                text += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            }
        }
        return text
    }

    static func readNode(name: String, in parent: FileDescriptor, path: String, immediate: Bool) throws -> ReadNode {
        let status: FileStatus
        do throws(Errno) { status = try parent.status(of: name) } catch {
            throw DocumentError(operation: .stat, path: path, errno: error)
        }
        switch status.kind {
        case .regular:
            let identity = DiskIdentity(status)
            let contents: FileWrapper.Contents
            if immediate {
                contents = .loaded(try readContents(name: name, in: parent, path: path, expecting: nil))
            } else {
                contents = .onDisk(path: path, identity: identity)
            }
            return ReadNode(
                node: .regularFile(contents), status: status,
                sync: SyncRecord(path: path, identity: identity))
        case .symbolicLink:
            let destination: String
            do throws(Errno) { destination = try parent.readSymbolicLink(name) } catch {
                throw DocumentError(operation: .readLink, path: path, errno: error)
            }
            return ReadNode(
                node: .symbolicLink(destination), status: status,
                sync: SyncRecord(path: path, identity: DiskIdentity(status)))
        case .directory:
            let directory: FileDescriptor
            do throws(Errno) {
                directory = try FileDescriptor.open(name, relativeTo: parent, options: [.directory, .noFollow])
            } catch {
                throw DocumentError(operation: .openDirectory, path: path, errno: error)
            }
            return try directory.closeAfter {
                let entries: [DirectoryEntry]
                do throws(Errno) { entries = try directory.directoryEntries() } catch {
                    throw DocumentError(operation: .listDirectory, path: path, errno: error)
                }
                var children: [String: FileWrapper] = [:]
                for entry in entries where !TemporaryName.isTemporary(entry.name) {
                    let childPath = path + "/" + entry.name
                    guard entry.nameIsUTF8 else {
                        // Its String names another file or none: read, it would be lost or doubled.
                        throw DocumentError(
                            operation: .listDirectory, path: childPath, errno: .illegalByteSequence,
                            detail: "the name is not UTF-8")
                    }
                    if let twin = children[entry.name] {
                        // Two names whose bytes differ but whose Strings are equal (canonically
                        // equivalent: `é` precomposed and decomposed): the children are keyed by
                        // String, so one would be read under the other's name and one lost.
                        let other = twin.state.withLock { $0.filename } ?? entry.name
                        throw DocumentError(
                            operation: .listDirectory, path: childPath, errno: .fileExists,
                            detail:
                                "its name, '\(Self.scalars(entry.name))', and '\(Self.scalars(other))' differ only in Unicode normalization, and a file wrapper's children are told apart by name: rename one of them"
                        )
                    }
                    let read = try readNode(name: entry.name, in: directory, path: childPath, immediate: immediate)
                    let child = FileWrapper(node: read.node, preferredFilename: entry.name)
                    child.state.withLock {
                        $0.filename = entry.name
                        $0.diskStatus = read.status
                        $0.sync = read.sync
                        $0.changedKeys = []
                    }
                    children[entry.name] = child
                }
                return ReadNode(
                    node: .directory(children), status: status,
                    sync: SyncRecord(path: path, identity: DiskIdentity(status)))
            }
        case .other:
            throw DocumentError(
                operation: .stat, path: path, errno: .invalidArgument,
                detail: "not a regular file, directory or symbolic link")
        }
    }

    static func readContents(at path: String, expecting identity: DiskIdentity?) throws -> Data {
        let file: FileDescriptor
        do throws(Errno) { file = try FileDescriptor.open(path, .readOnly, options: [.noFollow, .nonBlocking]) } catch {
            throw DocumentError(operation: .open, path: path, errno: error)
        }
        return try file.closeAfter { try readAll(file, path: path, expecting: identity) }
    }

    static func readContents(name: String, in parent: FileDescriptor, path: String, expecting identity: DiskIdentity?)
        throws -> Data
    {
        let file: FileDescriptor
        do throws(Errno) {
            file = try FileDescriptor.open(name, relativeTo: parent, .readOnly, options: [.noFollow, .nonBlocking])
        } catch {
            throw DocumentError(operation: .open, path: path, errno: error)
        }
        return try file.closeAfter { try readAll(file, path: path, expecting: identity) }
    }

    private static func readAll(_ file: FileDescriptor, path: String, expecting identity: DiskIdentity?) throws -> Data
    {
        do {
            let status = try file.status()
            // Opened without blocking (a FIFO put at a member's place would hold the reader
            // until something wrote to it): anything but a regular file is refused here.
            guard status.kind == .regular else {
                throw DocumentError(
                    operation: .read, path: path, errno: .invalidArgument, detail: "not a regular file")
            }
            if let identity, DiskIdentity(status) != identity {
                throw DocumentError(
                    operation: .read, path: path, errno: .noSuchFile,
                    detail: "the file changed on disk since it was read; read the wrapper again")
            }
            return Data(try file.readToEnd(sizeHint: Int(status.size)))
        } catch let error as Errno {
            throw DocumentError(operation: .read, path: path, errno: error)
        }
    }

    static func attributes(of status: FileStatus) -> [String: any Sendable] {
        let type: FileAttributeType =
            switch status.kind {
            case .regular: .typeRegular
            case .directory: .typeDirectory
            case .symbolicLink: .typeSymbolicLink
            case .other: .typeUnknown
            }
        return [
            FileAttributeKey.posixPermissions.rawValue: Int(status.permissions.rawValue),
            FileAttributeKey.size.rawValue: Int(status.size),
            FileAttributeKey.ownerAccountID.rawValue: Int(status.userID),
            FileAttributeKey.groupOwnerAccountID.rawValue: Int(status.groupID),
            FileAttributeKey.systemFileNumber.rawValue: Int(truncatingIfNeeded: status.inode),
            FileAttributeKey.modificationDate.rawValue: Date(
                timeIntervalSince1970: status.modified.timeIntervalSince1970),
            FileAttributeKey.type.rawValue: type.rawValue,
        ]
    }

    // MARK: Comparing

    static func matches(_ wrapper: FileWrapper, path: String) -> Bool {
        guard let status = try? FileDescriptor.currentWorkingDirectory.status(of: path) else { return false }
        switch wrapper.node {
        case .regularFile(let contents):
            guard status.kind == .regular else { return false }
            if case .onDisk(let source, let identity) = contents, source == path, identity == DiskIdentity(status) {
                return true
            }
            if let sync = wrapper.syncRecord, sync.path == path, sync.identity == DiskIdentity(status) { return true }
            guard let mine = wrapper.regularFileContents, Int64(mine.count) == status.size,
                let theirs = try? readContents(at: path, expecting: nil)
            else { return false }
            return mine == theirs
        case .symbolicLink(let destination):
            guard status.kind == .symbolicLink else { return false }
            return (try? FileDescriptor.currentWorkingDirectory.readSymbolicLink(path)) == destination
        case .directory(let children):
            guard status.kind == .directory,
                let directory = try? FileDescriptor.open(path, options: [.directory, .noFollow])
            else { return false }
            let names =
                (try? directory.closeAfter { () throws(Errno) -> [DirectoryEntry] in
                    try directory.directoryEntries()
                })?.map(\.name).filter { !TemporaryName.isTemporary($0) }
            guard let names, Set(names) == Set(children.keys) else { return false }
            return children.allSatisfy { key, child in matches(child, path: path + "/" + key) }
        }
    }
}
