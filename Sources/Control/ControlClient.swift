import Foundation
import Posix

/// Why a client could not talk to the daemon.
public struct ControlClientError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable {
        /// Nothing listens at the socket, or it cannot be reached.
        case unreachable
        /// The daemon closed the connection or sent something that is not the protocol.
        case protocolError
    }

    public var kind: Kind
    public var message: String
    public var description: String { message }
}

/// A blocking connection to the daemon's control socket: one JSON object per line each way.
public final class ControlClient {
    public let socketPath: String
    private let socket: FileDescriptor
    private var buffer: [UInt8] = []
    private var nextID = 1

    /// Connects to the daemon.
    ///
    /// - Throws: ``ControlClientError`` of kind `.unreachable`, saying why.
    public init(socketPath: String) throws {
        self.socketPath = socketPath
        do {
            socket = try FileDescriptor.unixSocket()
        } catch {
            throw ControlClientError(kind: .unreachable, message: "cannot create a socket: \(error)")
        }
        do {
            try socket.connect(toPath: socketPath)
        } catch {
            try? socket.close()
            let hint =
                switch error {
                case .noSuchFile, .connectionRefused: " — is autosaved running? (see --socket)"
                case .permissionDenied: " — the socket's mode does not let this user connect"
                default: ""
                }
            throw ControlClientError(kind: .unreachable, message: "cannot connect to \(socketPath): \(error)\(hint)")
        }
    }

    deinit { try? socket.close() }

    /// Sends one request (an `id` is added when it has none) without waiting for the reply.
    @discardableResult
    public func send(_ request: JSONValue) throws -> JSONValue {
        var request = request
        let id: JSONValue
        if let existing = request["id"] {
            id = existing
        } else {
            id = JSONValue(nextID)
            nextID += 1
            request = request.setting("id", id)
        }
        var line = request.serializedBytes()
        line.append(10)
        var offset = 0
        while offset < line.count {
            // send(MSG_NOSIGNAL): a daemon that closed the connection gives EPIPE, not SIGPIPE.
            do {
                offset += try line.withUnsafeBytes { bytes in
                    Result { () throws(Errno) in try socket.send(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
                }.get()
            } catch {
                throw ControlClientError(kind: .protocolError, message: "the daemon closed the connection: \(error)")
            }
        }
        return id
    }

    /// The next line from the daemon (a reply or an event), parsed.
    public func receive() throws -> JSONValue {
        while true {
            if let newline = buffer.firstIndex(of: 10) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                do { return try JSONValue(parsing: line) } catch {
                    throw ControlClientError(
                        kind: .protocolError, message: "the daemon sent a line that is not JSON: \(error)")
                }
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n: Int
            do {
                n = try chunk.withUnsafeMutableBytes { raw in
                    Result { () throws(Errno) in try socket.read(into: raw) }
                }.get()
            } catch {
                throw ControlClientError(kind: .protocolError, message: "reading from the daemon failed: \(error)")
            }
            if n == 0 { throw ControlClientError(kind: .protocolError, message: "the daemon closed the connection") }
            buffer += chunk[..<n]
        }
    }

    /// Sends `request` and returns its reply; lines that are events are passed to `onEvent`.
    @discardableResult
    public func call(_ request: JSONValue, onEvent: (JSONValue) -> Void = { _ in }) throws -> JSONValue {
        let id = try send(request)
        while true {
            let line = try receive()
            if line["event"] != nil {
                onEvent(line)
                continue
            }
            if line["id"] == id || line["id"] == nil { return line }
        }
    }

    /// The raw descriptor, for callers that need to wait on it (Ctrl-C handling).
    public var descriptor: Int32 { socket.rawValue }
}
