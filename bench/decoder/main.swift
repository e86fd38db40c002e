// Times the request decoder (``RequestDecoder``) beside the scanner it replaced
// (PreviousScanner.swift) on the same plain `set` and `append` lines, the daemon's most
// frequent requests, and prints nanoseconds per request for each. Built with the
// Control module's sources into one optimised executable:
//
//     bench/decoder/run
//
// Each decoder does what the daemon needs of a line: the command, the text as a
// string, the id and path as slices of the line.
import Foundation

func line(id: Bool, command: String, text: String) -> [UInt8] {
    Array(((id ? #"{"id":123456,"# : "{") + #""cmd":"\#(command)","doc":"bench/c17.txt","text":"\#(text)"}"#).utf8)
}

let cases: [(String, [UInt8])] = [
    ("set 16 B", line(id: true, command: "set", text: String(repeating: "x", count: 16))),
    ("set 100 B", line(id: true, command: "set", text: String(repeating: "x", count: 100))),
    ("set 1 KiB", line(id: true, command: "set", text: String(repeating: "x", count: 1024))),
    ("set 16 KiB", line(id: true, command: "set", text: String(repeating: "x", count: 16384))),
    ("append 100 B", line(id: true, command: "append", text: String(repeating: "y", count: 100))),
    ("set 16 B, no id", line(id: false, command: "set", text: String(repeating: "x", count: 16))),
    ("set 100 B with \\n", line(id: true, command: "set", text: String(repeating: #"abcdefghi\n"#, count: 10))),
]

@inline(never) func previous(_ line: UnsafeRawBufferPointer) -> Int {
    guard let raw = PreviousEditRequest.scanRaw(line) else { fatalError("declined") }
    return raw.text.utf8.count &+ raw.document.count &+ (raw.id?.count ?? 0) &+ (raw.command == .set ? 1 : 2)
}

@inline(never) func current(_ line: UnsafeRawBufferPointer) -> Int {
    let decoded = RequestDecoder.decode(line)
    guard case .request(let request) = consume decoded else { fatalError("refused") }
    let id = request.id?.withBytes { $0.count } ?? 0
    switch consume request {
    case let request:
        switch request.command {
        case .set(.success(let document), .success(.text(let text))):
            return text.utf8.count &+ document.bytes.withBytes { $0.count } &+ id &+ 1
        case .append(.success(let document), .success(let text)):
            return text.utf8.count &+ document.bytes.withBytes { $0.count } &+ id &+ 2
        default: fatalError("not a plain edit")
        }
    }
}

func nanoseconds(_ bytes: [UInt8], iterations: Int, _ decode: (UnsafeRawBufferPointer) -> Int) -> Double {
    var sink = 0
    let start = DispatchTime.now().uptimeNanoseconds
    bytes.withUnsafeBytes { line in
        for _ in 0..<iterations { sink &+= decode(line) }
    }
    let elapsed = DispatchTime.now().uptimeNanoseconds - start
    if sink == 42 { print("") }
    return Double(elapsed) / Double(iterations)
}

let rounds = Int(CommandLine.arguments.dropFirst().first ?? "") ?? 7
let only = CommandLine.arguments.dropFirst(2).first
print("ns/request, median of \(rounds) alternating rounds")
print("case".padding(toLength: 20, withPad: " ", startingAt: 0), "previous", "  decoder", "  ratio")
for (name, bytes) in cases where only == nil || name == only {
    let iterations = max(20_000, 40_000_000 / bytes.count)
    var old: [Double] = []
    var new: [Double] = []
    _ = nanoseconds(bytes, iterations: iterations / 10, previous)
    _ = nanoseconds(bytes, iterations: iterations / 10, current)
    for _ in 0..<rounds {
        old.append(nanoseconds(bytes, iterations: iterations, previous))
        new.append(nanoseconds(bytes, iterations: iterations, current))
    }
    let a = old.sorted()[rounds / 2]
    let b = new.sorted()[rounds / 2]
    print(
        name.padding(toLength: 20, withPad: " ", startingAt: 0), String(format: "%8.1f  %8.1f  %5.2f", a, b, b / a))
}
