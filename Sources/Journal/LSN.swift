/// A log sequence number: the position of one record in the journal.
///
/// The journal numbers records 1, 2, 3, … in the order they are appended, and the
/// numbering continues across restarts: every record stores its own number, and a new
/// segment starts after the highest number found in the directory.
public struct LSN: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ value: UInt64) { self.rawValue = value }

    /// The number before the first record: "nothing yet".
    public static let zero = LSN(0)

    public static func < (a: LSN, b: LSN) -> Bool { a.rawValue < b.rawValue }

    public var description: String { String(rawValue) }

    /// The next number.
    public var next: LSN { LSN(rawValue + 1) }
    /// The number before this one (`zero` stays `zero`).
    public var previous: LSN { LSN(rawValue == 0 ? 0 : rawValue - 1) }
}
