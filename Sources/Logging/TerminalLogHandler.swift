import Foundation
@preconcurrency import Glibc

/// Lines for a person at a terminal: local time, the level in a word, the message, and
/// only the fields the message does not already say —
/// `06:41:55.999 info  saved notes/todo.txt (17 bytes, 2.1 ms)`. Colour (the level, and
/// the time dimmed) only when asked for; ``forStandardError(environment:)`` asks for it
/// on a terminal without `NO_COLOR`.
public struct TerminalLogHandler: LogHandler {
    public let colour: Bool

    public init(colour: Bool) { self.colour = colour }

    /// The handler for standard error: this one when it is a terminal (coloured unless
    /// `NO_COLOR` is set to anything, or `TERM` is `dumb`), else the `<N>` lines of
    /// ``StderrLogHandler`` for the journal, a pipe or a file.
    public static func forStandardError(
        environment: [String: String] = ProcessInfo.processInfo.environment, isTerminal: Bool = isatty(2) == 1
    ) -> any LogHandler {
        guard isTerminal else { return StderrLogHandler() }
        let noColour = !(environment["NO_COLOR"] ?? "").isEmpty || environment["TERM"] == "dumb"
        return TerminalLogHandler(colour: !noColour)
    }

    public func log(
        level: LogLevel, message: String, metadata: [String: String], file: String, line: Int, function: String
    ) {
        let text = Self.line(level: level, message: message, metadata: metadata, at: Date(), colour: colour)
        StderrLogHandler.writeToStandardError(Array((text + "\n").utf8))
    }

    /// The line for one entry (without its newline).
    public static func line(
        level: LogLevel, message: String, metadata: [String: String], at date: Date, colour: Bool
    ) -> String {
        let time = clockTime(date)
        let word = level.word
        let padded = word.count < 5 ? word + String(repeating: " ", count: 5 - word.count) : word
        let escaped = message.escapingControlCharacters
        var text =
            colour
            ? "\u{1B}[2m\(time)\u{1B}[0m \(level.colourCode)\(padded)\u{1B}[0m \(escaped)"
            : "\(time) \(padded) \(escaped)"
        let extras = details(metadata, beside: escaped)
        if !extras.isEmpty { text += " (" + extras.joined(separator: ", ") + ")" }
        return text
    }

    /// The fields worth printing beside `message`: sizes and durations in words, and
    /// `key=value` for any other field whose value the message does not already hold.
    /// The message ID and content type are for the journal.
    static func details(_ metadata: [String: String], beside message: String) -> [String] {
        var extras: [String] = []
        if let bytes = metadata["bytes_written"].flatMap(Int.init) {
            extras.append(bytes == 1 ? "1 byte" : "\(bytes) bytes")
        }
        if let usec = metadata["duration_usec"].flatMap(Double.init) {
            extras.append(
                usec < 1_000_000 ? String(format: "%.1f ms", usec / 1000) : String(format: "%.2f s", usec / 1e6))
        }
        let shown: Set<String> = ["bytes_written", "duration_usec", "message_id", "content_type"]
        for key in metadata.keys.sorted() where !shown.contains(key) {
            let value = metadata[key]!.escapingControlCharacters
            if value.isEmpty || message.contains(value) { continue }
            // The number beside its name says nothing more.
            if key == "errno", metadata["errno_name"] != nil { continue }
            extras.append(value.contains(" ") ? "\(key)=\"\(value)\"" : "\(key)=\(value)")
        }
        return extras
    }

    /// `HH:MM:SS.mmm` in local time.
    static func clockTime(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970
        var seconds = time_t(interval.rounded(.down))
        let milliseconds = min(999, Int((interval - Double(seconds)) * 1000))
        var parts = tm()
        localtime_r(&seconds, &parts)
        return String(format: "%02d:%02d:%02d.%03d", parts.tm_hour, parts.tm_min, parts.tm_sec, milliseconds)
    }
}

extension LogLevel {
    /// The level as a person reads it in a terminal line.
    var word: String {
        switch self {
        case .emergency: "emerg"
        case .alert: "alert"
        case .critical: "crit"
        case .error: "error"
        case .warning: "warn"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }

    /// SGR attributes for the level word: red for errors and worse, yellow for warnings,
    /// bold for notices, dim for debug.
    var colourCode: String {
        switch self {
        case .emergency, .alert, .critical: "\u{1B}[1;31m"
        case .error: "\u{1B}[31m"
        case .warning: "\u{1B}[33m"
        case .notice: "\u{1B}[1m"
        case .info: "\u{1B}[32m"
        case .debug: "\u{1B}[2m"
        }
    }
}
