import Control
import FuzzSupport

/// The JSON parser on any bytes. A refused text has an error that points inside it; an
/// accepted one, serialised compact or pretty and parsed again, is the same value, and
/// serialises to the same bytes again (equality alone is lax: it compares numbers as
/// doubles and strings by canonical equivalence).
func fuzzJSON(_ input: [UInt8]) {
    let value: JSONValue
    do {
        value = try JSONValue(parsing: input)
    } catch {
        check(error.offset >= 0 && error.offset <= input.count, "error offset \(error.offset) outside the input")
        check(error.line >= 1 && error.column >= 1, "error position \(error.line):\(error.column)")
        return
    }
    check(value == value, "a parsed value is not equal to itself")
    let compact = value.serializedBytes(pretty: false)
    let pretty = Array(value.serialized(pretty: true).utf8)
    for text in [compact, pretty] {
        let again: JSONValue
        do { again = try JSONValue(parsing: text) } catch {
            fail("the serialised value does not parse: \(error)\ninput: \(show(input))\nserialised: \(show(text))")
        }
        check(again == value, "round trip changed the value\ninput: \(show(input))\nserialised: \(show(text))")
        check(
            again.serializedBytes(pretty: false) == compact,
            "round trip changed the serialisation\ninput: \(show(input))\nfirst: \(show(compact))\nthen: \(show(again.serializedBytes(pretty: false)))"
        )
    }
    // The String entry point reads the same bytes when they are UTF-8.
    if let text = String(validating: input, as: UTF8.self) {
        guard let other = try? JSONValue(parsing: text) else { fail("the String entry point refuses \(show(input))") }
        check(other.serializedBytes(pretty: false) == compact, "the String entry point disagrees on \(show(input))")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzJSON(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
