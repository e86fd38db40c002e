import Control
import Dispatch
import Foundation
import Posix
import Synchronization

/// `autosavectl`: parses the command line, talks to the daemon, prints the result.
public enum CommandLineTool {
    public enum ExitCode {
        public static let success: Int32 = 0
        public static let refused: Int32 = 1
        public static let usage: Int32 = 64
        public static let unavailable: Int32 = 69
        public static let interrupted: Int32 = 130
    }

    struct UsageError: Error {
        var message: String
        var subcommand: String?
    }

    struct Parsed {
        var subcommand: String?
        var positionals: [String] = []
        var values: [String: String] = [:]
        var flags: Set<String> = []
    }

    static let valueOptions: Set<String> = [
        "--socket", "--text", "--file", "--pointer", "--member", "--offset", "--length", "--patch", "--to", "--type",
        "--events",
    ]
    static let flagOptions: Set<String> = [
        "--json", "--wait", "--all", "--members", "--help", "-h", "--version", "--names",
    ]

    static func parse(_ arguments: [String]) throws(UsageError) -> Parsed {
        var parsed = Parsed()
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            if argument == "--" {
                while let rest = iterator.next() { parsed.positionals.append(rest) }
                break
            }
            if argument.hasPrefix("-") && argument != "-" {
                var name = argument
                var inline: String? = nil
                if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                    name = String(argument[..<equals])
                    inline = String(argument[argument.index(after: equals)...])
                }
                if valueOptions.contains(name) {
                    guard let value = inline ?? iterator.next() else {
                        throw UsageError(message: "\(name) needs a value", subcommand: parsed.subcommand)
                    }
                    parsed.values[name] = value
                } else if flagOptions.contains(name) {
                    parsed.flags.insert(name == "-h" ? "--help" : name)
                } else {
                    throw UsageError(message: "unknown option '\(argument)'", subcommand: parsed.subcommand)
                }
                continue
            }
            if parsed.subcommand == nil { parsed.subcommand = argument } else { parsed.positionals.append(argument) }
        }
        return parsed
    }

    /// Runs the tool with `arguments` (without the program name) and returns its exit status.
    public static func main(_ arguments: [String]) -> Int32 {
        let parsed: Parsed
        do { parsed = try parse(arguments) } catch {
            return usage(error.message, subcommand: error.subcommand)
        }
        if parsed.flags.contains("--version") {
            print("autosavectl \(AutosaveVersion.current)")
            return ExitCode.success
        }
        guard let name = parsed.subcommand else {
            if parsed.flags.contains("--help") {
                print(Catalog.overview)
                return ExitCode.success
            }
            return usage("no subcommand given", subcommand: nil)
        }
        guard let subcommand = Catalog.subcommands.first(where: { $0.name == name }) else {
            return usage("unknown subcommand '\(name)'", subcommand: nil)
        }
        if parsed.flags.contains("--help") {
            print(subcommand.help, terminator: "")
            return ExitCode.success
        }
        if subcommand.name == "completion" {
            guard parsed.positionals.count == 1, let script = Completion.script(for: parsed.positionals[0]) else {
                return usage("completion takes one shell: bash, zsh or fish", subcommand: "completion")
            }
            print(script, terminator: "")
            return ExitCode.success
        }
        let request: JSONValue
        do { request = try Requests.build(subcommand.name, parsed) } catch let error as UsageError {
            return usage(error.message, subcommand: subcommand.name)
        } catch {
            writeErr(Data("autosavectl: \(error)\n".utf8))
            return ExitCode.refused
        }
        let socketPath = parsed.values["--socket"] ?? ControlProtocol.defaultSocketPath()
        let client: ControlClient
        do { client = try ControlClient(socketPath: socketPath) } catch {
            writeErr(Data("autosavectl: \(error)\n".utf8))
            return ExitCode.unavailable
        }
        let session = Session(client: client, json: parsed.flags.contains("--json"), subcommand: subcommand.name)
        session.namesOnly = parsed.flags.contains("--names")
        return session.run(request)
    }

    static func usage(_ message: String, subcommand: String?) -> Int32 {
        let hint = subcommand.map { "see 'autosavectl \($0) --help'" } ?? "see 'autosavectl --help'"
        writeErr(Data("autosavectl: \(message)\n\(hint)\n".utf8))
        return ExitCode.usage
    }
}

/// Turns parsed arguments into a request.
enum Requests {
    typealias UsageError = CommandLineTool.UsageError

    static func document(_ parsed: CommandLineTool.Parsed, count: Int = 1) throws(UsageError) -> [String] {
        guard parsed.positionals.count == count else {
            throw UsageError(
                message: count == 1
                    ? "expected one document path" : "expected \(count) arguments, got \(parsed.positionals.count)",
                subcommand: parsed.subcommand)
        }
        return parsed.positionals
    }

    /// Contents from --text, --file (or '-') or standard input.
    static func contents(_ parsed: CommandLineTool.Parsed) throws -> Data {
        if parsed.values["--text"] != nil, parsed.values["--file"] != nil {
            throw UsageError(message: "give --text or --file, not both", subcommand: parsed.subcommand)
        }
        if let text = parsed.values["--text"] { return Data(text.utf8) }
        let file = parsed.values["--file"] ?? "-"
        if file == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        do throws(Errno) {
            let descriptor = try FileDescriptor.open(file, .readOnly)
            return Data(try descriptor.closeAfter { () throws(Errno) in try descriptor.readToEnd() })
        } catch {
            throw UsageError(message: "cannot read \(file): \(error)", subcommand: parsed.subcommand)
        }
    }

    static func contentFields(_ data: Data) -> [(key: String, value: JSONValue)] {
        if let text = String(data: data, encoding: .utf8) { return [("text", .string(text))] }
        return [("base64", .string(data.base64EncodedString()))]
    }

    static func number(_ parsed: CommandLineTool.Parsed, _ option: String) throws(UsageError) -> Int {
        guard let text = parsed.values[option] else {
            throw UsageError(message: "\(option) is required", subcommand: parsed.subcommand)
        }
        guard let value = Int(text), value >= 0 else {
            throw UsageError(message: "\(option) needs a whole number, not '\(text)'", subcommand: parsed.subcommand)
        }
        return value
    }

    static func build(_ name: String, _ parsed: CommandLineTool.Parsed) throws -> JSONValue {
        var fields: [(key: String, value: JSONValue)] = [("cmd", .string(name))]
        switch name {
        case "status", "list", "reload", "sync", "metrics":
            guard parsed.positionals.isEmpty else {
                throw UsageError(message: "\(name) takes no arguments", subcommand: name)
            }
        case "open", "create", "revert", "close":
            fields.append(("doc", .string(try document(parsed)[0])))
        case "get":
            fields.append(("doc", .string(try document(parsed)[0])))
            if let pointer = parsed.values["--pointer"] { fields.append(("pointer", .string(pointer))) }
            if let member = parsed.values["--member"] { fields.append(("member", .string(member))) }
            if parsed.flags.contains("--members") { fields.append(("members", true)) }
        case "set", "append":
            fields.append(("doc", .string(try document(parsed)[0])))
            let data = try contents(parsed)
            if name == "append" {
                guard let text = String(data: data, encoding: .utf8) else {
                    throw UsageError(message: "append takes UTF-8 text", subcommand: name)
                }
                fields.append(("text", .string(text)))
            } else {
                fields += contentFields(data)
            }
        case "replace":
            fields.append(("doc", .string(try document(parsed)[0])))
            fields.append(("offset", JSONValue(try number(parsed, "--offset"))))
            fields.append(("length", JSONValue(try number(parsed, "--length"))))
            guard let text = String(data: try contents(parsed), encoding: .utf8) else {
                throw UsageError(message: "replace takes UTF-8 text", subcommand: name)
            }
            fields.append(("text", .string(text)))
        case "patch":
            fields.append(("doc", .string(try document(parsed)[0])))
            let text: String
            if let patch = parsed.values["--patch"] {
                if parsed.values["--file"] != nil {
                    throw UsageError(message: "give --patch or --file, not both", subcommand: parsed.subcommand)
                }
                text = patch
            } else {
                text = String(decoding: try contents(parsed), as: UTF8.self)
            }
            do { fields.append(("patch", try JSONValue(parsing: text))) } catch {
                throw UsageError(message: "the patch is not valid JSON: \(error)", subcommand: name)
            }
        case "put-member":
            let arguments = try document(parsed, count: 2)
            fields.append(("doc", .string(arguments[0])))
            fields.append(("member", .string(arguments[1])))
            fields += contentFields(try contents(parsed))
        case "remove-member":
            let arguments = try document(parsed, count: 2)
            fields.append(("doc", .string(arguments[0])))
            fields.append(("member", .string(arguments[1])))
        case "save":
            if parsed.flags.contains("--all") {
                guard parsed.positionals.isEmpty else {
                    throw UsageError(message: "save --all takes no document", subcommand: name)
                }
                fields[0] = ("cmd", "save-all")
            } else {
                fields.append(("doc", .string(try document(parsed)[0])))
            }
            if parsed.flags.contains("--wait") { fields.append(("wait", true)) }
        case "save-all":
            guard parsed.positionals.isEmpty else {
                throw UsageError(message: "save-all takes no document", subcommand: name)
            }
            if parsed.flags.contains("--wait") { fields.append(("wait", true)) }
        case "export":
            guard !parsed.positionals.isEmpty else {
                throw UsageError(message: "name at least one document to export", subcommand: name)
            }
            guard let to = parsed.values["--to"] else {
                throw UsageError(message: "--to DIR is required", subcommand: name)
            }
            fields.append(("docs", .array(parsed.positionals.map { .string($0) })))
            fields.append(("to", .string(to)))
            if let type = parsed.values["--type"] { fields.append(("type", .string(type))) }
        case "subscribe":
            if !parsed.positionals.isEmpty { fields.append(("docs", .array(parsed.positionals.map { .string($0) }))) }
            if let events = parsed.values["--events"] {
                fields.append(("events", .array(events.split(separator: ",").map { .string(String($0)) })))
            }
        default:
            throw UsageError(message: "unknown subcommand '\(name)'", subcommand: nil)
        }
        return .object(fields)
    }
}
