import Posix

/// A short text kept in the journal's directory beside its segments, for its user to say
/// what the records are of (the daemon names the store root there), read back at the
/// next open. Segments are found by their names; the label's name is none of theirs.
extension Journal {
    static let labelName = "label"

    /// The label, or `nil` when none was ever written.
    public func readLabel() throws(JournalFailure) -> String? {
        do {
            let fd = try FileDescriptor.open(Self.labelName, relativeTo: directoryFD, .readOnly)
            let bytes = try fd.closeAfter { () throws(Errno) in try fd.readToEnd() }
            return String(decoding: bytes, as: UTF8.self)
        } catch .noSuchFile {
            return nil
        } catch {
            throw JournalFailure(.read, path: directory + "/" + Self.labelName, errno: error)
        }
    }

    /// Replaces the label, durably: a temporary file written and synced, renamed over the
    /// label, and the directory synced.
    public func writeLabel(_ text: String) throws(JournalFailure) {
        let temporary = "." + Self.labelName + ".tmp"
        var operation = JournalFailure.Operation.open
        var path = directory + "/" + temporary
        do {
            let fd = try FileDescriptor.open(
                temporary, relativeTo: directoryFD, .writeOnly, options: [.create, .truncate])
            try fd.closeAfter { () throws(Errno) in
                operation = .write
                try fd.writeAll(Array(text.utf8))
                operation = .fdatasync
                try fd.dataSync()
            }
            operation = .rename
            path = directory + "/" + Self.labelName
            try directoryFD.rename(temporary, to: Self.labelName)
            operation = .fsyncDirectory
            path = directory
            try directoryFD.sync()
        } catch {
            try? directoryFD.unlink(temporary)
            throw JournalFailure(operation, path: path, errno: error)
        }
    }

    /// Unlinks every segment file in the directory, and syncs it (``close(removingSegments:)``,
    /// with the directory's lock still held). The label stays.
    func removeSegmentFiles() throws(JournalFailure) {
        let fd = directoryFD
        let entries: [DirectoryEntry]
        do { entries = try fd.directoryEntries() } catch { throw JournalFailure(.list, path: directory, errno: error) }
        // Oldest first: should one fail, the segments left are the newer ones, whose release
        // marks then release nothing that is left (the other way round, the marks would
        // go first and the records they released come back).
        let segments = entries.compactMap { entry in SegmentFormat.base(ofName: entry.name).map { ($0, entry.name) } }
            .sorted { $0.0 < $1.0 }
        for (_, name) in segments {
            do { try fd.unlink(name) } catch {
                throw JournalFailure(.unlink, path: directory + "/" + name, errno: error)
            }
        }
        do { try fd.sync() } catch { throw JournalFailure(.fsyncDirectory, path: directory, errno: error) }
    }

    /// Whether `directory` holds segment files: a journal a run left, whose records a
    /// start may have to replay. `false` when the directory does not exist or cannot be read.
    public static func hasSegments(in directory: String) -> Bool {
        guard let fd = try? FileDescriptor.open(directory, .readOnly, options: [.directory]) else { return false }
        defer { try? fd.close() }
        guard let entries = try? fd.directoryEntries() else { return false }
        return entries.contains { SegmentFormat.base(ofName: $0.name) != nil }
    }
}
