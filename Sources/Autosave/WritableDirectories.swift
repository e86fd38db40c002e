import Foundation
import Logging
import Posix

/// The directories outside the store root that the daemon writes into at an operator's
/// request — `[Control] ExportDirectories=` and `[Metrics] TextfileDirectory=`, both
/// read once at start-up — looked at when it starts: one it cannot write into is said
/// then, naming the key and why, rather than first when an export or the metrics file
/// fails there. The usual cause is the unit's sandbox: under `ProtectSystem=strict`
/// (the shipped unit) every directory outside the unit's own is read-only to the daemon
/// until a drop-in names it in `ReadWritePaths=`.
enum WritableDirectories {
    /// A directory the daemon cannot write into, and why.
    struct Problem: Equatable, CustomStringConvertible {
        var key: String
        var path: String
        var errno: Errno

        var description: String {
            let what =
                key == "[Metrics] TextfileDirectory="
                ? "autosaved.prom cannot be written there" : "exports into it will fail"
            return "\(key)\(path) \(Self.reason(errno, path: path)): \(what)"
        }

        /// Why `path` cannot be written into, for an operator.
        static func reason(_ errno: Errno, path: String) -> String {
            let underHome = ["/home", "/root", "/run/user"].contains { PathName.isWithin(path, $0) }
            switch errno {
            case .readOnlyFileSystem:
                return "is on a file system the daemon sees read-only (\(Self.readOnlyHint(path)))"
            case .noSuchFile where underHome, .permissionDenied where underHome:
                return
                    "does not exist or cannot be reached by the daemon (\(errno)): a unit with ProtectHome=yes, as the shipped one, makes /home, /root and /run/user inaccessible, and ReadWritePaths= cannot open a path below them; set ProtectHome=read-only and ReadWritePaths=\(path) in a drop-in, or use a directory elsewhere"
            case .noSuchFile: return "does not exist"
            case .notDirectory: return "is not a directory"
            case .permissionDenied:
                return "is not writable by the daemon's user (uid \(geteuid()), gid \(getegid()))"
            default: return "cannot be written into (\(errno))"
            }
        }

        /// What an operator does about a directory the daemon sees read-only.
        static func readOnlyHint(_ path: String) -> String {
            "under a unit with ProtectSystem=strict, as the shipped one, allow it with ReadWritePaths=\(path) in a drop-in: systemctl edit autosaved"
        }
    }

    /// The directories of `configuration` the daemon cannot write into.
    static func problems(in configuration: Configuration) -> [Problem] {
        var found: [Problem] = []
        let directories =
            configuration.exportDirectories.map { ("[Control] ExportDirectories=", $0) }
            + (configuration.metricsTextfileDirectory.map { [("[Metrics] TextfileDirectory=", $0)] } ?? [])
        for (key, path) in directories {
            if let errno = whyNotWritable(path) { found.append(Problem(key: key, path: path, errno: errno)) }
        }
        return found
    }

    /// Logs a warning for each of ``problems(in:)``.
    static func warn(configuration: Configuration, log: Logger) {
        for problem in problems(in: configuration) {
            log.warning("\(problem)", ["path": problem.path])
        }
    }

    /// Why the daemon cannot create a file in `path` (`nil`: it can), by the effective
    /// ids, as a write would be checked; a read-only mount shows as `EROFS` even to root.
    static func whyNotWritable(_ path: String) -> Errno? {
        let status: FileStatus
        do throws(Errno) {
            status = try FileDescriptor.currentWorkingDirectory.status(of: path, followSymlinks: true)
        } catch {
            return error
        }
        guard status.kind == .directory else { return .notDirectory }
        guard faccessat(AT_FDCWD, path, W_OK | X_OK, AT_EACCESS) == 0 else { return .current }
        return nil
    }
}
