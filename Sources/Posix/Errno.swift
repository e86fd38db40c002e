import CLinux
import Glibc

/// An error number, as set by a failed system call.
///
/// Unknown values survive: the type wraps any `CInt`. Named values read
/// naturally in `catch` clauses: `catch Errno.noSpace`.
public struct Errno: RawRepresentable, Error, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: CInt

    public init(rawValue: CInt) { self.rawValue = rawValue }

    /// The symbolic name (`ENOSPC`) followed by the C library's message.
    public var description: String { "\(name) (\(system_strerror(rawValue)))" }

    /// The message the C library gives for this value.
    public var message: String { system_strerror(rawValue) }

    /// The symbolic name, such as `ENOSPC`, or `E<number>` for values without one here.
    public var name: String { Self.names[rawValue] ?? "E\(rawValue)" }

    public static let permissionDenied = Errno(rawValue: EACCES)
    public static let notPermitted = Errno(rawValue: EPERM)
    public static let noSuchFile = Errno(rawValue: ENOENT)
    public static let fileExists = Errno(rawValue: EEXIST)
    public static let noSpace = Errno(rawValue: ENOSPC)
    public static let readOnlyFileSystem = Errno(rawValue: EROFS)
    public static let ioError = Errno(rawValue: EIO)
    public static let interrupted = Errno(rawValue: EINTR)
    public static let invalidArgument = Errno(rawValue: EINVAL)
    public static let notDirectory = Errno(rawValue: ENOTDIR)
    public static let isDirectory = Errno(rawValue: EISDIR)
    public static let directoryNotEmpty = Errno(rawValue: ENOTEMPTY)
    public static let tooManySymbolicLinks = Errno(rawValue: ELOOP)
    public static let crossDevice = Errno(rawValue: EXDEV)
    public static let notSupported = Errno(rawValue: EOPNOTSUPP)
    public static let noSystemCall = Errno(rawValue: ENOSYS)
    public static let nameTooLong = Errno(rawValue: ENAMETOOLONG)
    public static let badFileDescriptor = Errno(rawValue: EBADF)
    public static let quotaExceeded = Errno(rawValue: EDQUOT)
    public static let tooManyLinks = Errno(rawValue: EMLINK)
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    public static let tooManyOpenFiles = Errno(rawValue: EMFILE)
    public static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    public static let brokenPipe = Errno(rawValue: EPIPE)
    public static let connectionReset = Errno(rawValue: ECONNRESET)
    /// Bytes that are not valid UTF-8 where a string is needed (a link destination).
    public static let illegalByteSequence = Errno(rawValue: EILSEQ)
    /// A number past what its type or format holds (a journal's LSNs).
    public static let valueTooLarge = Errno(rawValue: EOVERFLOW)
    /// No extended attribute of that name.
    public static let noData = Errno(rawValue: ENODATA)

    /// Lets `case Errno.noSpace:` match an `any Error`.
    public static func ~= (lhs: Errno, rhs: any Error) -> Bool {
        (rhs as? Errno) == lhs
    }

    private static let names: [CInt: String] = [
        EPERM: "EPERM", ENOENT: "ENOENT", ESRCH: "ESRCH", EINTR: "EINTR", EIO: "EIO", ENXIO: "ENXIO",
        E2BIG: "E2BIG", EBADF: "EBADF", EAGAIN: "EAGAIN", ENOMEM: "ENOMEM", EACCES: "EACCES",
        EFAULT: "EFAULT", EBUSY: "EBUSY", EEXIST: "EEXIST", EXDEV: "EXDEV", ENODEV: "ENODEV",
        ENOTDIR: "ENOTDIR", EISDIR: "EISDIR", EINVAL: "EINVAL", ENFILE: "ENFILE", EMFILE: "EMFILE",
        EFBIG: "EFBIG", ENOSPC: "ENOSPC", ESPIPE: "ESPIPE", EROFS: "EROFS", EMLINK: "EMLINK",
        EPIPE: "EPIPE", ENAMETOOLONG: "ENAMETOOLONG", ENOSYS: "ENOSYS", ENOTEMPTY: "ENOTEMPTY",
        ELOOP: "ELOOP", EOPNOTSUPP: "EOPNOTSUPP", EDQUOT: "EDQUOT", ETXTBSY: "ETXTBSY",
        ECONNREFUSED: "ECONNREFUSED", ECONNRESET: "ECONNRESET", ETIMEDOUT: "ETIMEDOUT",
        EILSEQ: "EILSEQ", EOVERFLOW: "EOVERFLOW", ENODATA: "ENODATA",
    ]
}

extension Errno {
    /// The calling thread's current `errno`.
    public static var current: Errno { Errno(rawValue: system_errno) }
}
