import Posix

/// A write that has been done completely and durably under a temporary name beside
/// its destination, and waits to be put in place with ``commit()`` or thrown away with
/// ``discard()``. Used to make a batch all-or-nothing: stage every file, then commit
/// them together (``DocumentExporter`` does). A prepared write that is neither
/// committed nor discarded is discarded when it is released.
public final class PreparedWrite {
    private var session: WriteSession
    private var staged: WriteSession.Staged?
    private let updatingNames: Bool
    /// What ``commitWithoutReplacing(alternative:)`` put in place, at a name that was free:
    /// its directory, name and identity, for ``takeBack()``.
    private var placed: (directoryPath: String, name: String, status: FileStatus)?

    init(session: WriteSession, staged: WriteSession.Staged, updatingNames: Bool) {
        self.session = session
        self.staged = staged
        self.updatingNames = updatingNames
    }

    deinit {
        if let staged { session.discard(staged) }
        session.closeAll()
    }

    /// The destination path.
    public var path: String { staged?.location.path ?? session.report.path }

    /// Renames the prepared node over its destination and syncs the directory.
    @discardableResult
    public func commit() throws -> DurableWriter.Report {
        guard let staged else { return session.report }
        do {
            try session.commit(staged, syncDirectory: true)
        } catch {
            discard()
            throw error
        }
        self.staged = nil
        session.commit(updatingNames: updatingNames)
        session.report.path = staged.location.path
        session.closeAll()
        return session.report
    }

    /// Puts the prepared node in place without replacing anything: under its destination's
    /// name if nothing is there, else under the first of `alternative(2)`, `alternative(3)`,
    /// … that is free (`renameat2` with `RENAME_NOREPLACE`, or its substitutes where the
    /// file system refuses the flag), and syncs the directory. Returns the path used.
    public func commitWithoutReplacing(alternative: (Int) -> String) throws -> String {
        guard var staged else { return session.report.path }
        // The node the renames below move: what takeBack() may remove again.
        let moved = try? staged.location.directory.status(of: staged.temporary)
        var attempt = 1
        while true {
            let name = attempt == 1 ? staged.location.name : alternative(attempt)
            do throws(Errno) {
                try Renaming.renameWithoutReplacing(staged.temporary, to: name, in: staged.location.directory)
                staged.location.name = name
                break
            } catch .fileExists where attempt < 10_000 {
                attempt += 1
            } catch {
                discard()
                throw DocumentError(
                    operation: .rename, path: join(staged.location.directoryPath, name), errno: error)
            }
        }
        if let moved { placed = (staged.location.directoryPath, staged.location.name, moved) }
        try? staged.file?.close()
        staged.file = nil
        self.staged = nil
        try session.sync(staged.location.directory, path: staged.location.directoryPath)
        session.report.path = staged.location.path
        session.closeAll()
        return staged.location.path
    }

    /// Takes back what ``commitWithoutReplacing(alternative:)`` put in place — at a name
    /// that was free, so removing it leaves the directory as it was — when it is still
    /// there as put (the same device, inode, size and modification time; anything else
    /// there is another program's and stays): removed, and its directory synced. How a
    /// batch whose later member could not be put in place undoes the earlier ones.
    /// Returns whether it was removed.
    @discardableResult
    public func takeBack() throws -> Bool {
        guard let placed else { return false }
        let path = join(placed.directoryPath, placed.name)
        do throws(Errno) {
            let directory = try FileDescriptor.open(placed.directoryPath, options: [.directory])
            return try directory.closeAfter { () throws(Errno) -> Bool in
                // Device and inode, and size and modification time, which a rename keeps: an
                // inode number freed and given to another program's new file is not taken
                // for the export's.
                let put = placed.status
                guard let found = try? directory.status(of: placed.name), found.device == put.device,
                    found.inode == put.inode, found.size == put.size, found.modified == put.modified
                else { return false }
                try TreeRemover.removeOrThrow(placed.name, in: directory)
                try directory.sync()
                self.placed = nil
                return true
            }
        } catch {
            throw DocumentError(operation: .unlink, path: path, errno: error)
        }
    }

    /// Removes the temporary node; the destination is untouched.
    public func discard() {
        if let staged { session.discard(staged) }
        staged = nil
        session.closeAll()
    }
}

extension DurableWriter {
    /// Writes `wrapper` completely and durably beside `path` without replacing
    /// anything; ``PreparedWrite/commit()`` puts it in place. Packages are always
    /// prepared as a whole new tree (unchanged files hard-linked from
    /// `originalContentsPath`, default `path`). A writer with a ``confinement`` prepares
    /// only beneath it, through no symbolic link.
    public func prepare(
        _ wrapper: FileWrapper, to path: String, options: FileWrapper.WritingOptions = [],
        originalContentsPath: String? = nil
    ) throws -> PreparedWrite {
        var session = WriteSession(policy: symlinkPolicy, swap: packageSwap, keepsContents: keepsWrittenContents)
        do {
            if let confinement { try session.confine(to: confinement) }
            let location = try session.resolve(path, followingLinks: !wrapper.isSymbolicLink)
            let staged = try session.stage(wrapper, at: location, linkBase: originalContentsPath ?? location.path)
            return PreparedWrite(session: session, staged: staged, updatingNames: options.contains(.withNameUpdating))
        } catch {
            session.closeAll()
            throw error
        }
    }
}
