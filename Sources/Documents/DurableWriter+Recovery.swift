import Posix

extension DurableWriter {
    /// What ``recover(at:recursive:)`` did.
    public struct RecoveryReport: Sendable, Hashable {
        /// Temporary files and trees removed (paths).
        public var removed: [String] = []
        /// Destinations put back in place after an interrupted package swap (paths).
        public var restored: [String] = []
        /// Subdirectories the process may not read or change (EACCES, EPERM): left as
        /// they are, the walk goes on with the others.
        public var skipped: [DocumentError] = []
    }

    /// Resolves what an interrupted write left in `path` (and, when `recursive`, in its
    /// subdirectories, never following symbolic links):
    ///
    /// - a package swap cut between its two renames (destination missing, old tree at
    ///   `.<name>.autosave-old-XXXXXX`) is finished with the complete new tree, or, if
    ///   there is none, undone by renaming the old tree back;
    /// - every other temporary file, link or tree (`.<name>.autosave-XXXXXX`,
    ///   `.<name>.autosave-old-XXXXXX`) is removed: a destination is never one of them,
    ///   so each is an unfinished new version or an already replaced old one.
    ///
    /// - Throws: ``DocumentError`` when a directory cannot be opened or listed or an entry cannot be removed.
    @discardableResult
    public static func recover(at path: String, recursive: Bool = true) throws -> RecoveryReport {
        var report = RecoveryReport()
        let directory: FileDescriptor
        do throws(Errno) { directory = try FileDescriptor.open(path, options: [.directory]) } catch {
            throw DocumentError(operation: .openDirectory, path: path, errno: error)
        }
        try directory.closeAfter { try recover(directory, path: path, recursive: recursive, into: &report) }
        return report
    }

    private static func recover(
        _ directory: FileDescriptor, path: String, recursive: Bool, into report: inout RecoveryReport
    ) throws {
        var entries: [DirectoryEntry]
        do throws(Errno) { entries = try directory.directoryEntries() } catch {
            throw DocumentError(operation: .listDirectory, path: path, errno: error)
        }
        var names = Set(entries.map(\.name))
        var changed = false

        func kind(of entry: DirectoryEntry) -> FileKind? {
            entry.kind ?? (try? directory.status(of: entry.name))?.kind
        }

        // 1. Interrupted swaps: an old tree whose destination is missing.
        for entry in entries {
            guard let parsed = TemporaryName.parse(entry.name), parsed.isOld, names.contains(entry.name) else {
                continue
            }
            let target = destination(of: parsed.target, temporary: entry.name, among: names)
            if let target, names.contains(target) { continue }
            let restoredName = target ?? parsed.target
            let newTrees = entries.filter {
                guard let p = TemporaryName.parse($0.name), !p.isOld, p.target == parsed.target else { return false }
                return names.contains($0.name) && kind(of: $0) == .directory
            }
            let newest = newTrees.max {
                ((try? directory.status(of: $0.name))?.changed ?? FileTime(seconds: 0, nanoseconds: 0))
                    < ((try? directory.status(of: $1.name))?.changed ?? FileTime(seconds: 0, nanoseconds: 0))
            }
            let source = newest?.name ?? entry.name
            do throws(Errno) { try Renaming.renameWithoutReplacing(source, to: restoredName, in: directory) } catch {
                throw DocumentError(operation: .rename, path: join(path, restoredName), errno: error)
            }
            names.remove(source)
            names.insert(restoredName)
            report.restored.append(join(path, restoredName))
            changed = true
        }

        // 2. Every remaining temporary entry.
        for name in names.sorted() where TemporaryName.isTemporary(name) {
            do throws(Errno) { try TreeRemover.removeOrThrow(name, in: directory) } catch {
                throw DocumentError(operation: .unlink, path: join(path, name), errno: error)
            }
            names.remove(name)
            report.removed.append(join(path, name))
            changed = true
        }
        if changed {
            do throws(Errno) { try directory.sync() } catch {
                throw DocumentError(operation: .syncDirectory, path: path, errno: error)
            }
        }

        guard recursive else { return }
        for entry in entries where names.contains(entry.name) {
            guard kind(of: entry) == .directory else { continue }
            let subPath = join(path, entry.name)
            do {
                let sub: FileDescriptor
                do throws(Errno) {
                    sub = try FileDescriptor.open(entry.name, relativeTo: directory, options: [.directory, .noFollow])
                } catch {
                    throw DocumentError(operation: .openDirectory, path: subPath, errno: error)
                }
                try sub.closeAfter { try recover(sub, path: subPath, recursive: true, into: &report) }
            } catch let error as DocumentError where error.errno == .permissionDenied || error.errno == .notPermitted {
                // A directory this process may not enter holds nothing it could have
                // written; one unreadable corner does not stop the rest.
                report.skipped.append(error)
            }
        }
    }

    /// The destination a temporary name stands for; for a shortened name, the one
    /// existing entry it is a prefix of, if there is exactly one.
    private static func destination(of target: String, temporary: String, among names: Set<String>) -> String? {
        if names.contains(target) || !TemporaryName.mayBeTruncated(temporary) { return target }
        let matches = names.filter { $0.hasPrefix(target) && !TemporaryName.isTemporary($0) }
        return matches.count == 1 ? matches.first : nil
    }
}
