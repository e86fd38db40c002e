import Autosave
import Control
import Foundation
import FuzzSupport

// MARK: A reference, written from RFC 7396 and RFC 6901 alone

/// Exact equality: object members in any order, keys and strings by their scalars (String's
/// == is canonical equivalence, which JSON does not have), numbers by their text.
func exactlyEqual(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case (.null, .null): return true
    case (.bool(let x), .bool(let y)): return x == y
    case (.number(let x), .number(let y)): return x.utf8.elementsEqual(y.utf8)
    case (.string(let x), .string(let y)): return x.utf8.elementsEqual(y.utf8)
    case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy(exactlyEqual)
    case (.object(let x), .object(let y)):
        let xs = Dictionary(x.map { (Array($0.key.utf8), $0.value) }, uniquingKeysWith: { $1 })
        let ys = Dictionary(y.map { (Array($0.key.utf8), $0.value) }, uniquingKeysWith: { $1 })
        guard xs.count == x.count, ys.count == y.count else {
            // With repeated names, member by member in order.
            return x.count == y.count
                && zip(x, y).allSatisfy { $0.key.utf8.elementsEqual($1.key.utf8) && exactlyEqual($0.value, $1.value) }
        }
        guard xs.count == ys.count else { return false }
        return xs.allSatisfy { key, value in ys[key].map { exactlyEqual(value, $0) } ?? false }
    default: return false
    }
}

/// The value as a reader sees it: of members with the same name (compared exactly), the
/// last one, which is the one ``JSONValue`` subscripts and pointers name.
func normalized(_ value: JSONValue) -> JSONValue {
    switch value {
    case .array(let elements): return .array(elements.map(normalized))
    case .object(let members):
        var seen = Set<[UInt8]>()
        var kept: [(key: String, value: JSONValue)] = []
        for member in members.reversed() where seen.insert(Array(member.key.utf8)).inserted {
            kept.append((member.key, normalized(member.value)))
        }
        return .object(kept.reversed())
    default: return value
    }
}

func member(_ members: [(key: String, value: JSONValue)], _ key: String) -> JSONValue? {
    members.last { $0.key.utf8.elementsEqual(key.utf8) }?.value
}

/// RFC 7396 §2's pseudo-code, on normalised values.
func referenceMerge(_ target: JSONValue?, _ patch: JSONValue) -> JSONValue {
    guard case .object(let patchMembers) = patch else { return patch }
    var members: [(key: String, value: JSONValue)] = []
    if case .object(let existing)? = target { members = existing }
    for (key, value) in patchMembers {
        let old = member(members, key)
        members.removeAll { $0.key.utf8.elementsEqual(key.utf8) }
        if !isNull(value) { members.append((key, referenceMerge(old, value))) }
    }
    return .object(members)
}

func isNull(_ value: JSONValue) -> Bool {
    if case .null = value { return true }
    return false
}

enum PointerOutcome {
    case value(JSONValue)
    case invalid
}

/// RFC 6901 on the pointer's bytes: `/`-separated tokens, `~1` is `/`, `~0` is `~`, any other `~` is an error.
func referencePointer(_ pointer: String, in value: JSONValue) -> PointerOutcome {
    let bytes = Array(pointer.utf8)
    if bytes.isEmpty { return .value(value) }
    guard bytes[0] == UInt8(ascii: "/") else { return .invalid }
    var current = value
    for raw in bytes.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
        var token: [UInt8] = []
        var index = raw.startIndex
        while index < raw.endIndex {
            if raw[index] == UInt8(ascii: "~") {
                guard index + 1 < raw.endIndex else { return .invalid }
                switch raw[index + 1] {
                case UInt8(ascii: "0"): token.append(UInt8(ascii: "~"))
                case UInt8(ascii: "1"): token.append(UInt8(ascii: "/"))
                default: return .invalid
                }
                index += 2
            } else {
                token.append(raw[index])
                index += 1
            }
        }
        switch current {
        case .object(let members):
            guard let next = members.last(where: { $0.key.utf8.elementsEqual(token) })?.value else { return .invalid }
            current = next
        case .array(let elements):
            let digits = token.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
            guard digits, !token.isEmpty, token.count == 1 || token[0] != 0x30, token.count <= 18,
                let i = Int(String(decoding: token, as: UTF8.self)), i < elements.count
            else { return .invalid }
            current = elements[i]
        default:
            return .invalid
        }
    }
    return .value(current)
}

/// Every value in `value` with the pointer that names it.
func allPointers(_ value: JSONValue, prefix: String = "", into out: inout [(String, JSONValue)]) {
    out.append((prefix, value))
    guard out.count < 200 else { return }
    switch value {
    case .array(let elements):
        for (i, element) in elements.enumerated() { allPointers(element, prefix: prefix + "/\(i)", into: &out) }
    case .object(let members):
        for (key, member) in members {
            var escaped = ""
            for scalar in key.unicodeScalars {
                switch scalar {
                case "~": escaped += "~0"
                case "/": escaped += "~1"
                default: escaped.unicodeScalars.append(scalar)
                }
            }
            allPointers(member, prefix: prefix + "/" + escaped, into: &out)
        }
    default: break
    }
}

func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

// MARK: The target

/// Input: a JSON document, 0x00, a merge patch, 0x00, pointers separated by 0x00.
func fuzzPatch(_ input: [UInt8]) {
    let pieces = parts(input)
    guard let targetText = String(validating: pieces[0], as: UTF8.self),
        var document = try? JSONDocument(text: targetText)
    else { return }
    let target = document.value
    let patchText = pieces.count > 1 ? text(pieces[1]) : "{}"
    let before = document.text
    guard let patch = try? JSONValue(parsing: patchText) else {
        // A refused patch changes nothing.
        do {
            try document.apply(.mergePatch(patchText), existingFile: nil)
            fail("an invalid patch was applied: \(show(pieces[1]))")
        } catch {}
        check(
            document.text.utf8.elementsEqual(before.utf8) && exactlyEqual(document.value, target),
            "a refused patch changed the document")
        return
    }
    let merged = target.merging(patch: patch)
    let expected = referenceMerge(normalized(target), normalized(patch))
    check(
        exactlyEqual(normalized(merged), expected),
        "merge differs from RFC 7396\ntarget: \(show(pieces[0]))\npatch: \(show(patchText.utf8))\ngot: \(show(merged.serializedBytes()))\nexpected: \(show(expected.serializedBytes()))"
    )
    // A merge patch is idempotent.
    check(
        exactlyEqual(normalized(merged.merging(patch: patch)), normalized(merged)),
        "patching twice differs from once\ntarget: \(show(pieces[0]))\npatch: \(show(patchText.utf8))")

    do { try document.apply(.mergePatch(patchText), existingFile: nil) } catch {
        fail("JSONDocument refuses a valid patch: \(error)")
    }
    check(exactlyEqual(document.value, merged), "JSONDocument's patch differs from merging(patch:)")
    guard let saved = try? JSONValue(parsing: document.text) else {
        fail("the patched document's text is not JSON: \(show(document.text.utf8))")
    }
    check(exactlyEqual(saved, merged), "the patched document's text reads as another value")

    // Pointers: every value of the result is found by its pointer, and any pointer gives what RFC 6901 says.
    var pointers: [(String, JSONValue)] = []
    allPointers(normalized(merged), into: &pointers)
    for (pointer, value) in pointers {
        guard let found = try? merged.value(at: pointer) else {
            fail("pointer \(show(pointer.utf8)) finds nothing in \(show(merged.serializedBytes()))")
        }
        check(exactlyEqual(normalized(found), value), "pointer \(show(pointer.utf8)) finds another value")
    }
    for piece in pieces.dropFirst(2) {
        let pointer = text(piece)
        let got = try? merged.value(at: pointer)
        switch referencePointer(pointer, in: merged) {
        case .invalid:
            check(got == nil, "pointer \(show(piece)) names nothing by RFC 6901 but finds a value")
        case .value(let value):
            guard let got else { fail("pointer \(show(piece)) finds nothing, RFC 6901 says it names a value") }
            check(exactlyEqual(got, value), "pointer \(show(piece)) finds another value than RFC 6901's")
        }
        if case .json(let answer)? = try? document.read(.jsonPointer(pointer), existingFile: nil) {
            check(
                got.map { exactlyEqual($0, answer) } ?? false, "the document answers pointer \(show(piece)) otherwise")
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzPatch(bytes(data, size))
    return 0
}

// The entry point (SwiftPM links it as `main`) runs libFuzzer's driver.
exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput))
