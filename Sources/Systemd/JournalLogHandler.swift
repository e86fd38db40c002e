import CSystemd
import Foundation
import Logging
import Posix

/// Structured entries for journald through `sd_journal_sendv`: `MESSAGE`, `PRIORITY`,
/// `CODE_FILE`/`CODE_LINE`/`CODE_FUNC`, `SYSLOG_IDENTIFIER`, and every metadata key as a
/// field (`document` → `DOCUMENT`, `bytes_written` → `BYTES_WRITTEN`; journald drops
/// names that are not `[A-Z0-9_]+`, so keys are mapped to that form).
public struct JournalLogHandler: LogHandler {
    public let identifier: String

    public init(identifier: String = "autosaved") { self.identifier = identifier }

    /// Whether journald is there to take entries: standard error is connected to it
    /// (`JOURNAL_STREAM`), or its socket exists.
    public static var isJournalAvailable: Bool {
        ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil
            || FileManager.default.fileExists(atPath: "/run/systemd/journal/socket")
    }

    /// Whether standard error itself goes to the journal (`JOURNAL_STREAM` names its
    /// device and inode), so that lines written there would be logged twice.
    public static var standardErrorIsJournal: Bool {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":").compactMap { UInt64($0) }
        guard parts.count == 2, let status = try? FileDescriptor(rawValue: 2).status() else { return false }
        return status.device == parts[0] && status.inode == parts[1]
    }

    /// The journald form of a metadata key.
    public static func fieldName(_ key: String) -> String {
        var name = String(key.uppercased().map { $0.isLetter || $0.isNumber ? $0 : "_" })
        while name.hasPrefix("_") { name.removeFirst() }
        if let first = name.first, first.isNumber { name = "F" + name }
        return name.isEmpty ? "FIELD" : name
    }

    public func log(
        level: LogLevel, message: String, metadata: [String: String], file: String, line: Int, function: String
    ) {
        var fields = [
            "MESSAGE=\(message)", "PRIORITY=\(level.rawValue)", "SYSLOG_IDENTIFIER=\(identifier)", "CODE_FILE=\(file)",
            "CODE_LINE=\(line)", "CODE_FUNC=\(function)",
        ]
        for (key, value) in metadata where !value.isEmpty {
            fields.append("\(Self.fieldName(key))=\(value)")
        }
        // One buffer for every field, alive for the call; iovecs point into it.
        var buffer: [UInt8] = []
        var ranges: [Range<Int>] = []
        for field in fields {
            let start = buffer.count
            buffer.append(contentsOf: field.utf8)
            ranges.append(start..<buffer.count)
        }
        buffer.withUnsafeMutableBytes { raw in
            var vectors = ranges.map { range in
                iovec(iov_base: raw.baseAddress! + range.lowerBound, iov_len: range.count)
            }
            _ = sd_journal_sendv(&vectors, Int32(vectors.count))
        }
    }
}

/// Hands each entry to several handlers (journald and standard error).
public struct MultiplexLogHandler: LogHandler {
    let handlers: [any LogHandler]

    public init(_ handlers: [any LogHandler]) { self.handlers = handlers }

    public func log(
        level: LogLevel, message: String, metadata: [String: String], file: String, line: Int, function: String
    ) {
        for handler in handlers {
            handler.log(level: level, message: message, metadata: metadata, file: file, line: line, function: function)
        }
    }
}
