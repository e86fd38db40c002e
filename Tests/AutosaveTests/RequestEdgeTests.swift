import Control
import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// Requests at the edges of what the protocol accepts: each is refused with the error
/// that names the problem, or answered at once, and a refusal changes nothing.
@Suite("Requests at the edges", .serialized, .timeLimit(.minutes(2)))
struct RequestEdgeTests {
    @Test(
        "A member path with a part longer than 255 bytes is refused with bad-request; the package keeps its members and saves"
    )
    func longMemberName() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        #expect(try client.call(["cmd": "create", "doc": "b.package"])["ok"] == true)
        #expect(
            try client.call(["cmd": "put-member", "doc": "b.package", "member": "1.txt", "text": "one"])["ok"] == true)
        let long = String(repeating: "a", count: 256)
        let reply = try client.call([
            "cmd": "put-member", "doc": "b.package", "member": .string("d/" + long), "text": "x",
        ])
        #expect(reply["error"]?["code"] == "bad-request", "\(reply)")
        #expect(reply["error"]?["message"]?.stringValue?.contains("longer than 255 bytes") == true, "\(reply)")
        let members = try client.call(["cmd": "get", "doc": "b.package", "members": true])
        #expect(members["members"] == ["1.txt"], "\(members)")
        #expect(try client.call(["cmd": "save", "doc": "b.package", "wait": true])["ok"] == true)
        #expect(try Disk.names(in: daemon.root + "/b.package") == ["1.txt"])
        // A part of exactly 255 bytes is a name a file can have.
        let longest = String(repeating: "b", count: 255)
        #expect(
            try client.call(["cmd": "put-member", "doc": "b.package", "member": .string(longest), "text": "y"])["ok"]
                == true)
        #expect(try client.call(["cmd": "save", "doc": "b.package", "wait": true])["ok"] == true)
        #expect(try Disk.bytes(daemon.root + "/b.package/" + longest) == Data("y".utf8))
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A member path over 1,024 bytes or 32 parts deep, and a document path over 2,048 bytes, are refused, naming the limit; nothing changes"
    )
    func longPaths() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        #expect(try client.call(["cmd": "create", "doc": "b.package"])["ok"] == true)
        let deep = Array(repeating: "d", count: 33).joined(separator: "/")
        let long = Array(repeating: String(repeating: "e", count: 200), count: 6).joined(separator: "/")
        for member in [deep, long] {
            let reply = try client.call([
                "cmd": "put-member", "doc": "b.package", "member": .string(member), "text": "x",
            ])
            #expect(reply["error"]?["code"] == "bad-request", "\(reply)")
            #expect(
                reply["error"]?["message"]?.stringValue?.contains("at most 1024 bytes and 32 parts") == true,
                "\(reply)")
        }
        // 32 parts and 1,024 bytes are members a package can have.
        let deepest = Array(repeating: "d", count: 32).joined(separator: "/")
        #expect(
            try client.call(["cmd": "put-member", "doc": "b.package", "member": .string(deepest), "text": "y"])["ok"]
                == true)
        let members = try client.call(["cmd": "get", "doc": "b.package", "members": true])
        #expect(members["members"] == [.string(deepest)], "\(members)")
        #expect(try client.call(["cmd": "save", "doc": "b.package", "wait": true])["ok"] == true)
        #expect(try Disk.bytes(daemon.root + "/b.package/" + deepest) == Data("y".utf8))
        let path = Array(repeating: String(repeating: "f", count: 200), count: 11).joined(separator: "/")
        let refused = try client.call(["cmd": "set", "doc": .string(path), "text": "z"])
        #expect(refused["error"]?["code"] == "invalid-path", "\(refused)")
        #expect(refused["error"]?["message"]?.stringValue?.contains("over the 2048") == true, "\(refused)")
        #expect(try Disk.names(in: daemon.root) == ["b.package"])
        // Another program's file at such a path is not opened: no document can be edited
        // but never read, saved on request or closed.
        try FileManager.default.createDirectory(
            atPath: daemon.root + "/" + PathName.parent(path), withIntermediateDirectories: true)
        try Disk.write("theirs", to: daemon.root + "/" + path)
        #expect(try client.call(["cmd": "sync"])["ok"] == true)
        let listed = try client.call(["cmd": "list"])["documents"]?.arrayValue ?? []
        #expect(listed.compactMap { $0["doc"]?.stringValue } == ["b.package"], "\(listed)")
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "The daemon raises its descriptors' soft limit to the hard one (a package's save holds a directory open at each level)",
        .enabled(if: Machine.has("prlimit")))
    func descriptorLimit() async throws {
        let directory = TemporaryDirectory("limits")
        let config = directory.sub("autosaved.conf")
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Control]\nSocket=\(directory.sub("control.sock"))\n", to: config)
        // Started as systemd starts it: 1,024 soft, more hard.
        let process = try DaemonProcess(
            "/usr/bin/prlimit", ["--nofile=1024:4096", Machine.product("autosaved"), "--config", config])
        await process.waitForLine(containing: "started:")
        let limits = try String(
            contentsOfFile: "/proc/\(process.process.processIdentifier)/limits", encoding: .utf8)
        let line = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") } ?? ""
        #expect(line.split(separator: " ").compactMap { Int($0) } == [4096, 4096], "\(line)")
        process.signal(SIGTERM)
        #expect(await process.exitStatus() == 0)
    }

    @Test("An export naming one document 3,000 times is answered with 3,000 distinct names, without a walk per name")
    func exportOfOneNameManyTimes() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        #expect(try client.call(["cmd": "set", "doc": "a.txt", "text": "x"])["ok"] == true)
        try FileManager.default.createDirectory(atPath: daemon.root + "/out", withIntermediateDirectories: true)
        let count = 3000
        let reply = try client.call([
            "cmd": "export", "docs": .array(Array(repeating: "a.txt", count: count)), "to": "out",
        ])
        let paths = reply["paths"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(paths.count == count && Set(paths).count == count, "\(reply["error"] ?? "")")
        #expect(paths.prefix(3).map { PathName.lastComponent($0) } == ["a.txt", "a 2.txt", "a 3.txt"])
        #expect(try Disk.names(in: daemon.root + "/out").count == count)
        #expect(await daemon.stop() == 0)
    }

    @Test("A JSON pointer that is not one is bad-request; one that designates nothing is not-found")
    func malformedPointer() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        #expect(try client.call(["cmd": "set", "doc": "c.json", "json": ["servers": [1]]])["ok"] == true)
        for pointer in ["servers", "/~2"] {
            let reply = try client.call(["cmd": "get", "doc": "c.json", "pointer": .string(pointer)])
            #expect(reply["error"]?["code"] == "bad-request", "\(pointer): \(reply)")
        }
        let missing = try client.call(["cmd": "get", "doc": "c.json", "pointer": "/clients"])
        #expect(missing["error"]?["code"] == "not-found", "\(missing)")
        #expect(try client.call(["cmd": "get", "doc": "c.json", "pointer": "/servers/0"])["value"] == 1)
        #expect(await daemon.stop() == 0)
    }

    @Test("Only a name with the extension json is a JSON document's: .json alone has none")
    func jsonPaths() {
        for path in ["a.json", "x/b.JSON", "c.Json"] { #expect(ControlSession.isJSONPath(path), "\(path)") }
        for path in [".json", "cfg/.json", "json", "a.jsonl", "a.json.txt"] {
            #expect(!ControlSession.isJSONPath(path), "\(path)")
        }
    }
}
