import Control
import FuzzSupport

/// The request decoders side by side on any line: ``EditRequest/scanRaw(_:)`` and
/// ``EditRequest/scan(_:)`` may decline a line (the general parser then reads it), but a
/// line they accept must mean exactly what the general parser makes of it — the same
/// command, document, text and id, with the id echoed as sent being JSON for that id —
/// and a line the general parser refuses, or reads as anything but a plain edit, they
/// must decline. (The same oracle as Tests/AutosaveTests/DecoderDifferentialTests.swift.)
func general(_ line: [UInt8]) -> (id: JSONValue?, command: String, document: String, text: String)? {
    guard let value = try? JSONValue(parsing: line), case .object(let members) = value else { return nil }
    guard Set(members.map { Array($0.key.utf8) }).count == members.count else { return nil }
    var id: JSONValue?
    var command: String?
    var document: String?
    var text: String?
    for member in members {
        switch (member.key, member.value) {
        case ("id", .array), ("id", .object): return nil
        case ("id", let value): id = value
        case ("cmd", .string(let name)) where name == "set" || name == "append": command = name
        case ("doc", .string(let path)): document = path
        case ("text", .string(let string)): text = string
        default: return nil
        }
    }
    guard let command, let document, let text else { return nil }
    return (id, command, document, text)
}

/// Exact equality: the same scalars (String's == is canonical equivalence), numbers by their text's value.
func same(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }

func same(_ a: JSONValue?, _ b: JSONValue?) -> Bool {
    switch (a, b) {
    case (nil, nil): true
    case (.string(let x)?, .string(let y)?): same(x, y)
    case (let x?, let y?): x == y
    default: false
    }
}

func fuzzRequest(_ line: [UInt8]) {
    let expected = general(line)
    line.withUnsafeBytes { bytes in
        if let scanned = EditRequest.scan(bytes) {
            let command = scanned.command == .set ? "set" : "append"
            guard let expected else { fail("scan accepts what the parser refuses: \(show(line))") }
            check(
                expected.command == command && same(expected.document, scanned.document)
                    && same(expected.text, scanned.text) && same(expected.id, scanned.id),
                "scan disagrees on \(show(line)): \(command) \(show(scanned.document.utf8)) \(show(scanned.text.utf8)) \(String(describing: scanned.id))"
            )
        }
        if let raw = EditRequest.scanRaw(bytes) {
            let command = raw.command == .set ? "set" : "append"
            guard let expected else { fail("scanRaw accepts what the parser refuses: \(show(line))") }
            check(
                expected.command == command && same(expected.document, raw.documentPath)
                    && same(expected.text, raw.text) && same(expected.id, raw.idValue),
                "scanRaw disagrees on \(show(line))")
            if let id = raw.id {
                // The id is echoed in replies as these bytes: they must be JSON for the same id.
                guard let echoed = try? JSONValue(parsing: Array(id)) else {
                    fail("scanRaw's id bytes are not JSON: \(show(id)) in \(show(line))")
                }
                check(same(echoed, expected.id), "scanRaw's id bytes mean another id in \(show(line))")
            } else {
                check(expected.id == nil, "scanRaw lost the id of \(show(line))")
            }
            if raw.decodedDocument == nil {
                // Kept as bytes: they must be the path's UTF-8 as it is.
                check(
                    raw.document.elementsEqual(expected.document.utf8),
                    "scanRaw's document bytes are not the path in \(show(line))")
            }
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzRequest(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
