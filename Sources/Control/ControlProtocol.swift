import Foundation

/// The control protocol's constants, shared by the daemon and its clients. The full
/// specification is `docs/PROTOCOL.md`.
public enum ControlProtocol {
    /// Stable error codes (`"error": {"code": …}`).
    public enum ErrorCode: String, Sendable, CaseIterable {
        /// The line is not a JSON object, a field is missing or has the wrong type, or a
        /// value is invalid for the document (JSON syntax, a range, a member path).
        case badRequest = "bad-request"
        case unknownCommand = "unknown-command"
        case notFound = "not-found"
        case alreadyExists = "already-exists"
        /// The path is absolute, has `..`, a NUL byte, or leads out of the store root.
        case invalidPath = "invalid-path"
        /// The request line is longer than `MaxRequestSize=`.
        case tooLarge = "too-large"
        /// The command does not apply to this kind of document.
        case unsupported
        case saveFailed = "save-failed"
        /// The peer's user or group is not allowed (`AllowUsers=`, `AllowGroups=`).
        case forbidden
        case shuttingDown = "shutting-down"
        case tooManyConnections = "too-many-connections"
        case cancelled
        case ioError = "io-error"
        case conflict
        case internalError = "internal-error"
    }

    /// The commands, in the order `docs/PROTOCOL.md` describes them.
    public static let commands = [
        "status", "list", "open", "create", "get", "set", "append", "replace", "patch", "put-member", "remove-member",
        "save", "save-all", "revert", "close", "export", "cancel", "subscribe", "sync", "reload", "metrics",
    ]

    /// The socket the daemon listens on when none is configured: `$RUNTIME_DIRECTORY/control.sock`
    /// under systemd, else `$XDG_RUNTIME_DIR/autosaved/control.sock`, else
    /// `/run/autosaved/control.sock` for root and `/tmp/autosaved-<uid>/control.sock` for others.
    public static func defaultSocketPath(
        environment: [String: String] = ProcessInfo.processInfo.environment, userID: UInt32 = UInt32(getuid())
    ) -> String {
        if let runtime = environment["RUNTIME_DIRECTORY"], !runtime.isEmpty {
            return String(runtime.split(separator: ":").first ?? Substring(runtime)) + "/control.sock"
        }
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty { return xdg + "/autosaved/control.sock" }
        return userID == 0 ? "/run/autosaved/control.sock" : "/tmp/autosaved-\(userID)/control.sock"
    }

    /// An error reply line's object.
    public static func errorReply(id: JSONValue?, code: ErrorCode, message: String) -> JSONValue {
        var members: [(key: String, value: JSONValue)] = []
        if let id { members.append(("id", id)) }
        members.append(("ok", false))
        members.append(("error", ["code": .string(code.rawValue), "message": .string(message)]))
        return .object(members)
    }
}
