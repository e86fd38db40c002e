import Documents
import Foundation
import Posix

/// A directory saved as one document (its extension is a declared package type).
///
/// Members are files at relative paths (`notes/a.txt`). A member read from disk is not
/// loaded until it is read; a member that was not touched is neither loaded nor
/// written by a save, which updates the package in place through `existingFile`.
public struct PackageDocument: AutosaveDocument {
    public static var readableContentTypes: [UTType] { [.package, .folder] }

    struct Directory: Sendable {
        var spelling: String
        var members: Int
    }

    struct Member: Sendable {
        /// The bytes, while they are not yet saved; `nil` when the saved wrapper holds them.
        var data: Data?
        var generation: UInt64
    }

    private var members: [String: Member] = [:]
    /// Every directory of the package, members' (`a` and `a/b` for `a/b/c.txt`) and empty
    /// ones read from disk, spelled as on disk, with how many members are below it. A
    /// directory stays when its last member is removed, as it stays on disk. A new member
    /// is checked against its own directories and its own path — a member where it needs a
    /// directory, members below where it would be a file, a directory name in another
    /// Unicode normalization — without a walk over every member.
    private var directories: [String: Directory] = [:]
    /// Member paths put or removed since the last save, with the generation of that change.
    private var touched: [String: UInt64] = [:]
    private var generation: UInt64 = 0

    public init() {}

    public init(configuration: ReadConfiguration) throws {
        guard configuration.file.isDirectory else {
            throw DocumentContentError(.invalid, "a package document must be a directory")
        }
        collect(configuration.file, prefix: "")
    }

    private mutating func collect(_ directory: FileWrapper, prefix: String) {
        for (name, child) in directory.fileWrappers ?? [:] {
            let path = prefix + name
            if child.isDirectory {
                if directories[path] == nil { directories[path] = Directory(spelling: path, members: 0) }
                collect(child, prefix: path + "/")
            } else if child.isRegularFile {
                members[path] = Member(data: nil, generation: 0)
                countDirectories(of: PathName.components(path).dropLast(), by: 1)
            }
        }
    }

    /// The member paths, sorted.
    public var memberPaths: [String] { members.keys.sorted() }

    /// The longest member path, in bytes, and the most directories it may go down: the
    /// package's path, its root's and the member's together stay well within what the
    /// kernel takes as one path (4,096 bytes), and a save, which holds a directory open
    /// at each level, within the descriptors it has.
    static let maxMemberPathBytes = 1024
    static let maxMemberDepth = 32

    /// Checks a member path: relative, no `.`/`..` or empty components, no NUL, no
    /// component longer than a file name can be (255 bytes: a longer one is accepted in
    /// memory, and every save of the package then fails), at most
    /// ``maxMemberPathBytes`` long and ``maxMemberDepth`` parts deep.
    static func validate(_ path: String) throws -> [String] {
        // Split at the bytes: a "/" followed by a combining mark separates two names all the same.
        let components = PathName.components(path, omittingEmpty: false)
        guard !path.isEmpty, path.utf8.first != UInt8(ascii: "/"), !path.utf8.contains(0),
            components.allSatisfy({ !$0.isEmpty && $0 != "." && $0 != ".." && !TemporaryName.isTemporary($0) })
        else {
            throw DocumentContentError(
                .invalid, "'\(path)' is not a valid member path (relative, no '.', '..' or empty parts)")
        }
        if components.contains(where: { $0.utf8.count > 255 }) {
            throw DocumentContentError(
                .invalid, "'\(path)' is not a valid member path: a part is longer than 255 bytes")
        }
        if path.utf8.count > maxMemberPathBytes || components.count > maxMemberDepth {
            throw DocumentContentError(
                .invalid,
                "not a valid member path: \(path.utf8.count) bytes in \(components.count) parts (at most \(maxMemberPathBytes) bytes and \(maxMemberDepth) parts)"
            )
        }
        return components
    }

    public func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
        // What is there may be no directory: another program can put a file or a link
        // where the package was (a conflict copy is then the edits alone).
        let package =
            configuration.existingFile.flatMap { $0.isDirectory ? $0 : nil }
            ?? FileWrapper(directoryWithFileWrappers: [:])
        // In the order of their last edits: a member `x` put after `x/y` was removed must
        // not be taken for a file in the way of `x/y` (nor the other way round).
        for (key, _) in touched.sorted(by: { $0.value < $1.value }) {
            let components = try Self.validate(key)
            var directory = package
            for name in components.dropLast() {
                if let existing = directory.fileWrappers?[name], existing.isDirectory {
                    directory = existing
                } else {
                    if let blocking = directory.fileWrappers?[name] { directory.removeFileWrapper(blocking) }
                    let created = FileWrapper(directoryWithFileWrappers: [:])
                    created.preferredFilename = name
                    directory.addFileWrapper(created)
                    directory = created
                }
            }
            let name = components.last!
            if let old = directory.fileWrappers?[name] { directory.removeFileWrapper(old) }
            if let member = members[key] {
                guard let data = member.data else { continue }
                directory.addRegularFile(withContents: data, preferredFilename: name)
            }
        }
        return package
    }

    public mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws {
        switch edit {
        case .putMember(let path, let data):
            let components = try Self.validate(path)
            let isNew: Bool
            // Names another member or directory has in another Unicode normalization: the
            // kernel sees two names, the package's dictionaries (and the file wrappers') one.
            // (Split at the bytes, as the kernel splits, and looked up as Swift compares
            // strings, canonically, which the dictionaries do.)
            if let index = members.index(forKey: path) {
                if !members.keys[index].utf8.elementsEqual(path.utf8) {
                    throw DocumentContentError(
                        .invalid,
                        "member '\(path)' is member '\(members.keys[index])' in another Unicode normalization: a package cannot hold both"
                    )
                }
                isNew = false
            } else {
                try checkNewMember(path, components)
                // A removal not saved yet of the same name in another spelling: the next save
                // would write this member under that spelling (a key set keeps its own).
                if let index = touched.index(forKey: path), !touched.keys[index].utf8.elementsEqual(path.utf8) {
                    throw DocumentContentError(
                        .invalid,
                        "member '\(path)' was removed as '\(touched.keys[index])', the same name in another Unicode normalization, and that removal is not saved yet: save the package first"
                    )
                }
                isNew = true
            }
            generation += 1
            members[path] = Member(data: data, generation: generation)
            touched[path] = generation
            if isNew {
                // A file with a directory's very name takes the (empty) directory's place.
                if directories[path] != nil { forgetDirectories(atOrUnder: path) }
                countDirectories(of: components.dropLast(), by: 1)
            }
        case .removeMember(let path):
            _ = try Self.validate(path)
            guard let index = members.index(forKey: path), members.keys[index].utf8.elementsEqual(path.utf8) else {
                throw DocumentContentError(.notFound, "the package has no member '\(path)'")
            }
            members.remove(at: index)
            countDirectories(of: PathName.components(path).dropLast(), by: -1)
            generation += 1
            touched[path] = generation
        default:
            throw DocumentContentError(.unsupported, "\(edit.name) does not apply to package documents")
        }
    }

    /// Refuses a new member at `path` that the package cannot hold beside its members and
    /// directories: one of its directories is a member, or is a directory in another
    /// Unicode normalization; or members are below the path; or the path is a directory in
    /// another normalization.
    private func checkNewMember(_ path: String, _ components: [String]) throws {
        var prefix = ""
        for name in components.dropLast() {
            prefix = prefix.isEmpty ? name : prefix + "/" + name
            if let index = members.index(forKey: prefix) {
                throw DocumentContentError(
                    .invalid, "member '\(path)' clashes with member '\(members.keys[index])'")
            }
            if let directory = directories[prefix], !directory.spelling.utf8.elementsEqual(prefix.utf8) {
                throw DocumentContentError(
                    .invalid,
                    "member '\(path)' names the directory '\(directory.spelling)' in another Unicode normalization: a package cannot hold both"
                )
            }
        }
        if let directory = directories[path] {
            if !directory.spelling.utf8.elementsEqual(path.utf8) {
                throw DocumentContentError(
                    .invalid,
                    "member '\(path)' is the directory '\(directory.spelling)' in another Unicode normalization: a package cannot hold both"
                )
            }
            if directory.members > 0 {
                throw DocumentContentError(
                    .invalid,
                    "member '\(path)' clashes with the \(directory.members) member(s) under '\(directory.spelling)/'")
            }
        }
    }

    /// Counts a member in (or out of) each of its directories, given by name from the top.
    private mutating func countDirectories(of names: ArraySlice<String>, by change: Int) {
        var prefix = ""
        for name in names {
            prefix = prefix.isEmpty ? name : prefix + "/" + name
            directories[prefix, default: Directory(spelling: prefix, members: 0)].members += change
        }
    }

    /// Forgets an empty directory and those inside it (a member file takes its place).
    private mutating func forgetDirectories(atOrUnder path: String) {
        directories.removeValue(forKey: path)
        let inside = path + "/"
        directories = directories.filter { !PathName.starts($0.key, with: inside) }
    }

    public func read(_ query: DocumentQuery, existingFile: FileWrapper?) throws -> QueryResult {
        switch query {
        case .members, .contents:
            return .members(memberPaths)
        case .member(let path):
            let components = try Self.validate(path)
            guard let index = members.index(forKey: path), members.keys[index].utf8.elementsEqual(path.utf8) else {
                throw DocumentContentError(.notFound, "the package has no member '\(path)'")
            }
            let member = members.values[index]
            if let data = member.data { return .data(data) }
            var node = existingFile
            for name in components { node = node?.fileWrappers?[name] }
            guard let node else { throw DocumentContentError(.notFound, "the package has no member '\(path)' on disk") }
            return .data(try node.contents())  // a DocumentError names what kept it from being read
        default:
            throw DocumentContentError(.unsupported, "package documents answer a member or the member list")
        }
    }

    public mutating func didSave(_ snapshot: PackageDocument) {
        for (key, savedGeneration) in snapshot.touched where touched[key] == savedGeneration {
            touched.removeValue(forKey: key)
            if members[key]?.generation == savedGeneration { members[key]?.data = nil }
        }
    }

    /// The package's directory is gone (another program removed or moved it) and the
    /// package is to be written again from memory, whole: members whose bytes are held —
    /// unsaved, or still in `saved`, the wrapper last read or written — are written by the
    /// next save; those whose bytes lived only on disk are forgotten. Returns their paths.
    mutating func holdMembersForRecreation(saved: FileWrapper?) -> [String] {
        var lost: [String] = []
        for (path, member) in members where member.data == nil {
            var node = saved
            for name in PathName.components(path) { node = node?.fileWrappers?[name] }
            if let node, node.isRegularFile, node.isContentsLoaded, let data = try? node.contents() {
                generation += 1
                members[path] = Member(data: data, generation: generation)
                touched[path] = generation
            } else {
                lost.append(path)
            }
        }
        for path in lost {
            members.removeValue(forKey: path)
            countDirectories(of: PathName.components(path).dropLast(), by: -1)
        }
        return lost.sorted()
    }

    /// Whether a member's bytes are in memory (for tests and diagnostics).
    public func isLoaded(_ path: String) -> Bool { members[path]?.data != nil }

    /// Whether the package holds a member spelled exactly `path`, and its bytes when they
    /// are in memory (`nil` when only the file on disk holds them).
    func member(at path: String) -> (held: Bool, data: Data?) {
        guard let index = members.index(forKey: path), members.keys[index].utf8.elementsEqual(path.utf8) else {
            return (false, nil)
        }
        return (true, members.values[index].data)
    }
}
