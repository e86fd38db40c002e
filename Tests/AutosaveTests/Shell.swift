import Foundation
import TestSupport

/// Programs run the way a user's shell runs them: with an environment of the test's
/// choosing, standard input, and a working directory.
enum Shell {
    /// Runs `bash -c command` to completion.
    @discardableResult
    static func run(
        _ command: String, environment: [String: String]? = nil, input: String? = nil, in directory: String? = nil
    ) throws -> Machine.Output {
        try execute("/bin/bash", ["-c", command], environment: environment, input: input, in: directory)
    }

    /// Runs a program (a name is looked up on `PATH`) to completion.
    @discardableResult
    static func execute(
        _ program: String, _ arguments: [String], environment: [String: String]? = nil, input: String? = nil,
        in directory: String? = nil
    ) throws -> Machine.Output {
        try Machine.checkDescriptors()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program.hasPrefix("/") ? program : "/usr/bin/env")
        process.arguments = program.hasPrefix("/") ? arguments : [program] + arguments
        if let environment { process.environment = environment }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let out = Pipe()
        let err = Pipe()
        let stdin = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = stdin
        try process.run()
        stdin.fileHandleForWriting.write(Data((input ?? "").utf8))
        try stdin.fileHandleForWriting.close()
        // Both pipes drained at once: a child that fills one while the other is read would block.
        let errors = Collected()
        let drained = DispatchSemaphore(value: 0)
        let reader = Thread {
            errors.data = Machine.readToEnd(err)
            drained.signal()
        }
        reader.start()
        let outData = Machine.readToEnd(out)
        process.waitUntilExit()
        drained.wait()
        return Machine.Output(
            status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errors.data, as: UTF8.self))
    }
}

/// Bytes one thread reads and another takes once a semaphore says they are complete.
private final class Collected: @unchecked Sendable {
    var data = Data()
}
