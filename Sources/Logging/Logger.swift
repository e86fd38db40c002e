import Foundation

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
        // Names from files and clients may hold control characters: escaped, they can
        // neither split the entry into forged lines nor act on a terminal.
        var text = "<\(level.rawValue)>\(message.escapingControlCharacters)"
        // The message ID is for journald; on a terminal it is noise.
        for key in metadata.keys.sorted() where key != "message_id" && !(metadata[key] ?? "").isEmpty {
            let value = metadata[key]!.escapingControlCharacters
            text += value.contains(" ") ? " \(key)=\"\(value)\"" : " \(key)=\(value)"
        }
        text += "\n"
        // One write(2) per entry: lines from concurrent tasks never interleave. A failed
        // write (stderr on a full disk, a closed pipe) loses the line, never the daemon.
        try? FileHandle.standardError.write(contentsOf: Data(text.utf8))
    }
}
