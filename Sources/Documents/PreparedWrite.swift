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
        try? staged.file?.close()
        staged.file = nil
        self.staged = nil
        try session.sync(staged.location.directory, path: staged.location.directoryPath)
        session.report.path = staged.location.path
        session.closeAll()
        return staged.location.path
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
