extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(String(value)) }
    public init(floatLiteral value: Double) { self = .number(String(value)) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(elements.map { (key: $0.0, value: $0.1) })
    }
    public init(nilLiteral: ()) { self = .null }

    public init(_ value: Int) { self = .number(String(value)) }
    public init(_ value: UInt64) { self = .number(String(value)) }
    public init(_ value: Double) {
        self =
            value.isFinite
            ? .number(value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)) : .null
    }
    public init(_ value: String) { self = .string(value) }
    public init(_ value: Bool) { self = .bool(value) }

    /// The member `key` of an object (the last one, if repeated); names are compared by
    /// their Unicode scalars, as JSON compares them.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.key.utf8.elementsEqual(key.utf8) })?.value
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// An integral number's value.
    public var intValue: Int? {
        if case .number(let n) = self { return Self.wholeNumber(n) }
        return nil
    }

    /// The value of the JSON number `text` when it is a whole number an `Int` holds
    /// exactly: `12`, `-3`, `1.0`, `2e3`. Digits alone are read as an integer, never
    /// through a `Double` (which would round `-9223372036854775809` to `Int.min`); a
    /// fraction or an exponent is read as a `Double`, whole and in range or `nil`.
    static func wholeNumber(_ text: String) -> Int? {
        if let int = Int(text) { return int }
        guard text.utf8.contains(where: { $0 == UInt8(ascii: ".") || $0 | 0x20 == UInt8(ascii: "e") }) else {
            return nil
        }
        return Double(text).flatMap { $0 == $0.rounded() ? Int(exactly: $0) : nil }
    }

    public var doubleValue: Double? {
        if case .number(let n) = self { return Double(n) }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var isNull: Bool { self == .null }

    /// A copy with `key` set (replacing an existing member) — for building messages.
    public func setting(_ key: String, _ value: JSONValue) -> JSONValue {
        guard case .object(var members) = self else { return self }
        if let index = members.firstIndex(where: { $0.key == key }) {
            members[index].value = value
        } else {
            members.append((key, value))
        }
        return .object(members)
    }
}
