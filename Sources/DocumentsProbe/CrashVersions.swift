import Documents
import Foundation

/// Self-checking versions for crash tests: each version of a file or package can be
/// verified complete and consistent from its bytes alone.
enum CrashVersions {
    struct Torn: Error, CustomStringConvertible {
        var description: String
    }

    /// `v<N>\n`, a payload whose length and bytes derive from N, `end v<N>\n`.
    static func fileContents(version: Int) -> Data {
        let length = 1000 + (version * 7919) % 60000
        var data = Data("v\(version)\n".utf8)
        data.append(contentsOf: (0..<length).map { UInt8(truncatingIfNeeded: ($0 &* 31) &+ version) })
        data.append(contentsOf: Array("\nend v\(version)\n".utf8))
        return data
    }

    /// The version in the file at `path`; throws if the file is not exactly one complete version.
    static func fileVersion(at path: String) throws -> Int {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        guard let newline = data.firstIndex(of: 10),
            let header = String(data: data[..<newline], encoding: .utf8), header.hasPrefix("v"),
            let version = Int(header.dropFirst())
        else { throw Torn(description: "\(path): no version header") }
        guard data == fileContents(version: version) else {
            throw Torn(description: "\(path): version \(version) is torn (\(data.count) bytes)")
        }
        return version
    }

    static func memberContents(_ member: Int, version: Int) -> Data {
        Data("member \(member) written at version \(version)\n".utf8)
    }

    /// A package at `version`: `manifest` holds the version; member `version % members`
    /// changed at that version, so every member's bytes follow from the manifest.
    static func package(version: Int, members: Int) -> FileWrapper {
        var children: [String: FileWrapper] = [:]
        for member in 0..<members {
            children["m\(member)"] = FileWrapper(regularFileWithContents: memberContents(member, version: 0))
        }
        children["manifest"] = FileWrapper(regularFileWithContents: Data("\(version)\n".utf8))
        return FileWrapper(directoryWithFileWrappers: children)
    }

    static func advance(_ package: FileWrapper, to version: Int, members: Int) {
        let changed = version % members
        for name in ["manifest", "m\(changed)"] {
            if let old = package.fileWrappers?[name] { package.removeFileWrapper(old) }
        }
        package.addRegularFile(withContents: Data("\(version)\n".utf8), preferredFilename: "manifest")
        package.addRegularFile(
            withContents: memberContents(changed, version: version), preferredFilename: "m\(changed)")
    }

    /// The version of the package at `path`; throws unless every member matches it.
    static func packageVersion(at path: String) throws -> Int {
        let url = URL(fileURLWithPath: path)
        let manifest = try String(contentsOf: url.appendingPathComponent("manifest"), encoding: .utf8)
        guard let version = Int(manifest.trimmingCharacters(in: .newlines)) else {
            throw Torn(description: "\(path): unreadable manifest")
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: path).filter { $0 != "manifest" }.sorted()
        let members = names.count
        for member in 0..<members {
            var last = 0
            for v in stride(from: version, to: 0, by: -1) where v % members == member {
                last = v
                break
            }
            let data = try Data(contentsOf: url.appendingPathComponent("m\(member)"))
            guard data == memberContents(member, version: last) else {
                throw Torn(description: "\(path): member m\(member) does not match version \(version)")
            }
        }
        return version
    }
}
