extension String {
    /// The text with the characters that would act on a terminal or split a line —
    /// C0 and C1 controls, DEL, the Unicode line and paragraph separators — written as
    /// escapes (`\n`, `\t`, `\r`, `\u{1B}` …), for names that come from files and
    /// clients and are printed in log lines and command output. Other text is unchanged.
    public var escapingControlCharacters: String {
        guard unicodeScalars.contains(where: Self.needsEscape) else { return self }
        var result = ""
        result.reserveCapacity(utf8.count + 8)
        for scalar in unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case "\r": result += "\\r"
            case _ where Self.needsEscape(scalar):
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028
            || scalar.value == 0x2029
    }
}
