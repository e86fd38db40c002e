import Foundation
import Glibc

/// How much is logged.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case emergency = 0
    case alert, critical, error, warning, notice, info, debug

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }

    public var name: String {
        switch self {
        case .emergency: "emerg"
        case .alert: "alert"
        case .critical: "crit"
        case .error: "err"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }

    public init?(name: String) {
        let aliases: [String: LogLevel] = [
            "emergency": .emergency, "critical": .critical, "error": .error, "warn": .warning,
        ]
        guard let level = LogLevel.allCases.first(where: { $0.name == name }) ?? aliases[name] else { return nil }
        self = level
    }
}

/// A log handler: where entries go (stderr lines, or journald).
public protocol LogHandler: Sendable {
    func log(level: LogLevel, message: String, metadata: [String: String], file: String, line: Int, function: String)
}

/// A cheap logging value; entries below `level` are dropped before they are formatted.
public struct Logger: Sendable {
    public var level: LogLevel
    public var handler: any LogHandler

    public init(level: LogLevel = .info, handler: any LogHandler = StderrLogHandler()) {
        self.level = level
        self.handler = handler
    }

    public func log(
        _ level: LogLevel, _ message: @autoclosure () -> String, _ metadata: [String: String] = [:],
        file: String = #fileID, line: Int = #line, function: String = #function
    ) {
        guard level <= self.level else { return }
        handler.log(level: level, message: message(), metadata: metadata, file: file, line: line, function: function)
    }

    public func critical(
        _ message: @autoclosure () -> String, _ metadata: [String: String] = [:], file: String = #fileID,
        line: Int = #line, function: String = #function
    ) { log(.critical, message(), metadata, file: file, line: line, function: function) }

    public func error(
        _ message: @autoclosure () -> String, _ metadata: [String: String] = [:], file: String = #fileID,
        line: Int = #line, function: String = #function
    ) { log(.error, message(), metadata, file: file, line: line, function: function) }

    public func warning(
        _ message: @autoclosure () -> String, _ metadata: [String: String] = [:], file: String = #fileID,
        line: Int = #line, function: String = #function
    ) { log(.warning, message(), metadata, file: file, line: line, function: function) }

    public func notice(
        _ message: @autoclosure () -> String, _ metadata: [String: String] = [:], file: String = #fileID,
        line: Int = #line, function: String = #function
    ) { log(.notice, message(), metadata, file: file, line: line, function: function) }

    public func info(
        _ message: @autoclosure () -> String, _ metadata: [String: String] = [:], file: String = #fileID,
        line: Int = #line, function: String = #function
    ) { log(.info, message(), metadata, file: file, line: line, function: function) }

    public func debug(
        _ message: @autoclosure () -> String, _ metadata: [String: String] = [:], file: String = #fileID,
        line: Int = #line, function: String = #function
    ) { log(.debug, message(), metadata, file: file, line: line, function: function) }
}

/// Readable lines on standard error with the `<N>` priority prefix systemd and
/// journald understand: `<6>saved notes/todo.txt document=notes/todo.txt bytes_written=42`.
public struct StderrLogHandler: LogHandler {
    public init() {}

    public func log(
        level: LogLevel, message: String, metadata: [String: String], file: String, line: Int, function: String
    ) {
        Self.writeToStandardError(Self.line(level: level, message: message, metadata: metadata))
    }

    /// Writes `line` to standard error with `write(2)`, one call for all of it unless the
    /// kernel takes less: lines from concurrent tasks never interleave. A failed write
    /// (standard error on a full disk, a pipe whose reader is gone, a terminal closed)
    /// loses the line, never the daemon — not `FileHandle`, which traps on such errors.
    public static func writeToStandardError(_ line: [UInt8]) {
        line.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(2, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// The entry's line, its newline included: `<6>saved a.txt bytes_written=42 document=a.txt`
    /// (fields sorted by name, a value with a space quoted, empty ones and `message_id` left out).
    public static func line(level: LogLevel, message: String, metadata: [String: String]) -> [UInt8] {
        // Names from files and clients may hold control characters: escaped, they can
        // neither split the entry into forged lines nor act on a terminal.
        var line: [UInt8] = []
        line.reserveCapacity(64 + message.utf8.count + 48 * metadata.count)
        line.append(UInt8(ascii: "<"))
        line.append(UInt8(ascii: "0") + UInt8(level.rawValue))
        line.append(UInt8(ascii: ">"))
        Self.appendEscaped(message, to: &line)
        // The message ID is for journald; on a terminal it is noise.
        for key in metadata.keys.sorted() where key != "message_id" {
            guard let value = metadata[key], !value.isEmpty else { continue }
            line.append(UInt8(ascii: " "))
            line.append(contentsOf: key.utf8)
            line.append(UInt8(ascii: "="))
            let quoted = value.utf8.contains(UInt8(ascii: " "))
            if quoted { line.append(UInt8(ascii: "\"")) }
            Self.appendEscaped(value, to: &line)
            if quoted { line.append(UInt8(ascii: "\"")) }
        }
        line.append(UInt8(ascii: "\n"))
        return line
    }

    /// `text` as ``Swift/String/escapingControlCharacters`` writes it; printable ASCII,
    /// almost every line, is copied as it is.
    static func appendEscaped(_ text: String, to line: inout [UInt8]) {
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            line.append(contentsOf: text.utf8)
        } else {
            line.append(contentsOf: text.escapingControlCharacters.utf8)
        }
    }
}
