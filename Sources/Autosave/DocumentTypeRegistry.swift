import Documents
import Foundation
import Posix

/// Which document type holds which files: by filename extension, with package
/// extensions for directories. Library users register their own types.
public struct DocumentTypeRegistry: Sendable {
    public struct Registration: Sendable {
        public var contentType: UTType
        public var documentType: any AutosaveDocument.Type
        public var filenameExtensions: [String]
        /// Whether documents of this type are directories.
        public var isPackage: Bool
    }

    /// The latest registration for each extension (lowercased), for files and for
    /// directories: a name's type is one lookup, however many types there are.
    private var byExtension: [String: (file: Registration?, package: Registration?)] = [:]

    /// The built-in types: plain text (every extension of a type conforming to
    /// `public.plain-text`), JSON, packages for `packageExtensions`, and raw data for
    /// every other file.
    public init(packageExtensions: [String] = Configuration(environment: [:]).packageExtensions) {
        register(JSONDocument.self, contentType: .json, filenameExtensions: ["json"])
        register(
            PlainTextDocument.self, contentType: .plainText,
            filenameExtensions: [
                "txt", "text", "md", "markdown", "log", "csv", "tsv", "yaml", "yml", "xml", "html",
                "swift", "py", "sh", "c", "h", "conf", "ini", "toml",
            ])
        for ext in packageExtensions {
            let type = UTType.declare(
                "org.autosaved.package.\(ext)", conformingTo: [.package], filenameExtensions: [ext],
                description: "\(ext) package")
            register(PackageDocument.self, contentType: type, filenameExtensions: [ext], isPackage: true)
        }
    }

    /// Registers `documentType` for files (or, with `isPackage`, directories) with these
    /// extensions; later registrations win over earlier ones and over the built-ins.
    public mutating func register<Document: AutosaveDocument>(
        _ documentType: Document.Type, contentType: UTType, filenameExtensions: [String], isPackage: Bool? = nil
    ) {
        let package = isPackage ?? contentType.conforms(to: .directory)
        let registration = Registration(
            contentType: contentType, documentType: documentType,
            filenameExtensions: filenameExtensions.map { $0.lowercased() }, isPackage: package)
        for ext in registration.filenameExtensions {
            if package {
                byExtension[ext, default: (nil, nil)].package = registration
            } else {
                byExtension[ext, default: (nil, nil)].file = registration
            }
        }
    }

    /// The registration for a file (or directory) named `name`; `nil` for a directory
    /// that is not a package. A file without a registered extension is raw data.
    public func registration(forName name: String, isDirectory: Bool) -> Registration? {
        let ext = Self.lowercasedExtension(name)
        if !ext.isEmpty, let found = isDirectory ? byExtension[ext]?.package : byExtension[ext]?.file {
            return found
        }
        return isDirectory ? nil : unregisteredFile(ext)
    }

    /// The registration for a new document named `name`: a package when its extension is
    /// a package's, else a file.
    public func registration(forNewName name: String) -> Registration {
        let ext = Self.lowercasedExtension(name)
        if !ext.isEmpty, let found = byExtension[ext], let registration = found.package ?? found.file {
            return registration
        }
        return unregisteredFile(ext)
    }

    /// A file whose extension no type is registered for: plain text when its type is one,
    /// raw data otherwise.
    private func unregisteredFile(_ ext: String) -> Registration {
        if !ext.isEmpty, let type = UTType(filenameExtension: ext), type.conforms(to: .plainText) {
            return Registration(
                contentType: type, documentType: PlainTextDocument.self, filenameExtensions: [ext], isPackage: false)
        }
        let type = ext.isEmpty ? UTType.data : (UTType(filenameExtension: ext) ?? .data)
        return Registration(
            contentType: type, documentType: DataDocument.self, filenameExtensions: [], isPackage: false)
    }

    /// The extension of the last component of `name`, lowercased (copied only when it is
    /// not lower-case ASCII already).
    private static func lowercasedExtension(_ name: String) -> String {
        let ext = PathName.pathExtension(name)
        let lowerASCII = ext.utf8.allSatisfy { $0 < 0x80 && !(UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }
        return lowerASCII ? ext : ext.lowercased()
    }

    /// Whether a directory named `name` is a package document.
    public func isPackage(_ name: String) -> Bool { registration(forName: name, isDirectory: true) != nil }
}
