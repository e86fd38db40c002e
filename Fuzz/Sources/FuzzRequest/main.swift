import Control
import FuzzSupport

/// The request decoder against the reference on any line: ``RequestDecoder`` reads the
/// line straight from its bytes, ``ControlRequest/reference(_:)-([UInt8])`` parses it
/// with the general JSON parser and reads the value field by field. Both must give the
/// same request — the same id text to echo, the same fields or field errors, strings
/// scalar for scalar — or the same refusal, and a line the parser refuses the decoder
/// must find not JSON on its own. (The same oracle as
/// Tests/AutosaveTests/DecoderDifferentialTests.swift.)
func exact(_ value: some Any) -> [UInt8] { Array(String(reflecting: value).utf8) }

/// Whether `==` may not be enough to tell two readings of `line` apart: strings that are
/// not ASCII (raw, or by an escape: == on strings is canonical equivalence), or a `json`
/// value (numbers compared by value, members in any order). Only then are their
/// descriptions compared, which is slow.
func needsExact(_ line: [UInt8]) -> Bool {
    line.contains { $0 >= 0x80 || $0 == UInt8(ascii: "\\") }
        || line.withUnsafeBytes { bytes in bytes.firstRange(of: "json".utf8) != nil }
}

func fuzzRequest(_ line: [UInt8]) {
    let reference = ControlRequest.reference(line)
    let strict = needsExact(line)
    // The decoder's requests hold slices of the line: looked at while it is borrowed.
    line.withUnsafeBytes { bytes in
        let scanned = RequestDecoder.scan(bytes)
        if case .refused(nil, let message) = reference, message.hasPrefix("the request is not JSON: ") {
            check(scanned == .notJSON, "the parser refuses \(show(line)), the decoder reads \(scanned)")
        } else {
            guard case .decoded(let decoded) = scanned else {
                fail("the decoder refuses \(show(line)), the parser reads \(reference)")
            }
            check(
                decoded == reference && (!strict || exact(decoded) == exact(reference)),
                "on \(show(line)): decoder \(decoded), reference \(reference)")
            if case .request(let request) = decoded {
                switch request.command {
                case .set(.success(let document), _), .append(.success(let document), _):
                    // Kept as bytes (a slice of the line, or decoded): they must be the path's UTF-8.
                    check(
                        document.bytes.array.elementsEqual(document.path.utf8),
                        "the document's bytes are not its path in \(show(line))")
                default: break
                }
            }
        }
        let decoded = RequestDecoder.decode(bytes)
        check(
            decoded == reference && (!strict || exact(decoded.owned()) == exact(reference)),
            "decode(_:) differs from the reference on \(show(line))")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzRequest(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
