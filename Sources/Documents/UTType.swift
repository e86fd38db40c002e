import Posix

/// A uniform type identifier: a name for a kind of data (`public.json`), the types it
/// conforms to, and the filename extensions and MIME types that mark it.
///
/// Mirrors Apple's `UniformTypeIdentifiers.UTType`. Apple reads declarations from
/// bundles' `Info.plist`; here the system types are built in and others are declared
/// at run time with ``declare(_:conformingTo:filenameExtensions:mimeTypes:description:)``
/// (or the Apple-shaped ``init(exportedAs:conformingTo:)`` and ``init(importedAs:conformingTo:)``).
public struct UTType: Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The reverse-DNS identifier, such as `public.utf8-plain-text`.
    public let identifier: String

    private init(uncheckedIdentifier identifier: String) { self.identifier = identifier }

    /// The type with `identifier`, or `nil` when no such type is declared.
    public init?(_ identifier: String) {
        guard UTTypeRegistry.shared.declaration(of: identifier) != nil else { return nil }
        self.identifier = identifier
    }

    /// The type declared for `filenameExtension` that conforms to `supertype`; an
    /// undeclared extension yields a dynamic type (`dyn.…`) conforming to `supertype`,
    /// as on Apple platforms. `nil` only for an empty extension.
    public init?(filenameExtension: String, conformingTo supertype: UTType = .data) {
        let ext = filenameExtension.lowercased()
        guard !ext.isEmpty else { return nil }
        if let found = UTTypeRegistry.shared.type(forExtension: ext, conformingTo: supertype) {
            self = found
            return
        }
        self = UTTypeRegistry.shared.dynamicType(tag: "filename-extension", value: ext, conformingTo: supertype)
    }

    /// The type declared for `mimeType` that conforms to `supertype`, or a dynamic one.
    public init?(mimeType: String, conformingTo supertype: UTType = .data) {
        let mime = mimeType.lowercased()
        guard !mime.isEmpty else { return nil }
        if let found = UTTypeRegistry.shared.type(forMIMEType: mime, conformingTo: supertype) {
            self = found
            return
        }
        self = UTTypeRegistry.shared.dynamicType(tag: "mime-type", value: mime, conformingTo: supertype)
    }

    /// A type the program owns. If it was not declared before, it is declared now
    /// conforming to `parentType` (or `public.data`), with no tags.
    public init(exportedAs identifier: String, conformingTo parentType: UTType? = nil) {
        self = UTTypeRegistry.shared.declareIfAbsent(identifier, conformingTo: parentType.map { [$0] } ?? [])
    }

    /// A type another party owns that the program uses. Declared like ``init(exportedAs:conformingTo:)``.
    public init(importedAs identifier: String, conformingTo parentType: UTType? = nil) {
        self = UTTypeRegistry.shared.declareIfAbsent(identifier, conformingTo: parentType.map { [$0] } ?? [])
    }

    /// Declares (or re-declares) a type: its parents, the filename extensions and MIME
    /// types that mark it (the first of each is the preferred one), and a description.
    ///
    /// A type that conforms to ``package`` is stored as a directory that behaves as one file.
    @discardableResult
    public static func declare(
        _ identifier: String,
        conformingTo parents: [UTType],
        filenameExtensions: [String] = [],
        mimeTypes: [String] = [],
        description: String? = nil
    ) -> UTType {
        UTTypeRegistry.shared.declare(
            UTTypeDeclaration(
                identifier: identifier,
                parents: parents.map(\.identifier),
                filenameExtensions: filenameExtensions.map { $0.lowercased() },
                mimeTypes: mimeTypes.map { $0.lowercased() },
                description: description
            ))
        return UTType(uncheckedIdentifier: identifier)
    }

    static func unchecked(_ identifier: String) -> UTType { UTType(uncheckedIdentifier: identifier) }

    // MARK: Conformance

    /// Whether this type is `type` or descends from it.
    public func conforms(to type: UTType) -> Bool {
        identifier == type.identifier || UTTypeRegistry.shared.ancestors(of: identifier).contains(type.identifier)
    }

    /// Whether this type conforms to `type` and is not `type`.
    public func isSubtype(of type: UTType) -> Bool { self != type && conforms(to: type) }

    /// Whether `type` conforms to this type and is not it.
    public func isSupertype(of type: UTType) -> Bool { type.isSubtype(of: self) }

    /// Every type this one conforms to, excluding itself.
    public var supertypes: Set<UTType> {
        Set(UTTypeRegistry.shared.ancestors(of: identifier).map(UTType.unchecked))
    }

    // MARK: Tags and description

    /// The tags by class: `"public.filename-extension"` and `"public.mime-type"`.
    public var tags: [String: [String]] {
        guard let declaration = UTTypeRegistry.shared.declaration(of: identifier) else { return [:] }
        var result: [String: [String]] = [:]
        if !declaration.filenameExtensions.isEmpty {
            result["public.filename-extension"] = declaration.filenameExtensions
        }
        if !declaration.mimeTypes.isEmpty { result["public.mime-type"] = declaration.mimeTypes }
        return result
    }

    /// The first filename extension declared for this type, if any.
    public var preferredFilenameExtension: String? {
        UTTypeRegistry.shared.declaration(of: identifier)?.filenameExtensions.first
    }

    /// The first MIME type declared for this type, if any.
    public var preferredMIMEType: String? { UTTypeRegistry.shared.declaration(of: identifier)?.mimeTypes.first }

    /// A human-readable description, if one was declared.
    public var localizedDescription: String? { UTTypeRegistry.shared.declaration(of: identifier)?.description }

    /// Whether the type is known by declaration (built in or declared at run time).
    public var isDeclared: Bool { UTTypeRegistry.shared.declaration(of: identifier)?.isDynamic == false }

    /// Whether the type was made up for an undeclared tag (`dyn.…`).
    public var isDynamic: Bool { identifier.hasPrefix("dyn.") }

    /// Whether the type is declared by the system (`public.…`, `com.apple.…`).
    public var isPublic: Bool { identifier.hasPrefix("public.") || identifier.hasPrefix("com.apple.") }

    public var description: String { identifier }
    public var debugDescription: String { "UTType(\(identifier))" }
}

// MARK: Common types

extension UTType {
    public static let item = UTType.unchecked("public.item")
    public static let content = UTType.unchecked("public.content")
    public static let compositeContent = UTType.unchecked("public.composite-content")
    public static let data = UTType.unchecked("public.data")
    public static let directory = UTType.unchecked("public.directory")
    public static let folder = UTType.unchecked("public.folder")
    public static let package = UTType.unchecked("com.apple.package")
    public static let symbolicLink = UTType.unchecked("public.symlink")
    public static let text = UTType.unchecked("public.text")
    public static let plainText = UTType.unchecked("public.plain-text")
    public static let utf8PlainText = UTType.unchecked("public.utf8-plain-text")
    public static let utf16PlainText = UTType.unchecked("public.utf16-plain-text")
    public static let delimitedText = UTType.unchecked("public.delimited-values-text")
    public static let commaSeparatedText = UTType.unchecked("public.comma-separated-values-text")
    public static let tabSeparatedText = UTType.unchecked("public.tab-separated-values-text")
    public static let sourceCode = UTType.unchecked("public.source-code")
    public static let swiftSource = UTType.unchecked("public.swift-source")
    public static let script = UTType.unchecked("public.script")
    public static let shellScript = UTType.unchecked("public.shell-script")
    public static let pythonScript = UTType.unchecked("public.python-script")
    public static let json = UTType.unchecked("public.json")
    public static let xml = UTType.unchecked("public.xml")
    public static let yaml = UTType.unchecked("public.yaml")
    public static let html = UTType.unchecked("public.html")
    public static let markdown = UTType.unchecked("net.daringfireball.markdown")
    public static let propertyList = UTType.unchecked("com.apple.property-list")
    public static let log = UTType.unchecked("public.log")
    public static let image = UTType.unchecked("public.image")
    public static let png = UTType.unchecked("public.png")
    public static let jpeg = UTType.unchecked("public.jpeg")
    public static let pdf = UTType.unchecked("com.adobe.pdf")
    public static let archive = UTType.unchecked("public.archive")
    public static let zip = UTType.unchecked("public.zip-archive")
    public static let gzip = UTType.unchecked("org.gnu.gnu-zip-archive")
}

// MARK: Registry

struct UTTypeDeclaration: Sendable {
    var identifier: String
    var parents: [String]
    var filenameExtensions: [String]
    var mimeTypes: [String]
    var description: String?
    var isDynamic = false
}

final class UTTypeRegistry: Sendable {
    static let shared = UTTypeRegistry()

    private struct State {
        var declarations: [String: UTTypeDeclaration] = [:]
        var byExtension: [String: [String]] = [:]
        var byMIMEType: [String: [String]] = [:]
        var ancestorCache: [String: Set<String>] = [:]
    }

    private let state = Lock(State())

    private init() {
        for declaration in Self.systemDeclarations { insert(declaration) }
    }

    func declaration(of identifier: String) -> UTTypeDeclaration? {
        state.withLock { $0.declarations[identifier] }
    }

    func declare(_ declaration: UTTypeDeclaration) { insert(declaration) }

    func declareIfAbsent(_ identifier: String, conformingTo parents: [UTType]) -> UTType {
        if declaration(of: identifier) == nil {
            insert(
                UTTypeDeclaration(
                    identifier: identifier, parents: parents.isEmpty ? ["public.data"] : parents.map(\.identifier),
                    filenameExtensions: [], mimeTypes: [], description: nil))
        }
        return .unchecked(identifier)
    }

    func dynamicType(tag: String, value: String, conformingTo supertype: UTType) -> UTType {
        let identifier = "dyn.\(tag).\(value).\(supertype.identifier)"
        if declaration(of: identifier) == nil {
            var declaration = UTTypeDeclaration(
                identifier: identifier, parents: [supertype.identifier],
                filenameExtensions: tag == "filename-extension" ? [value] : [],
                mimeTypes: tag == "mime-type" ? [value] : [], description: nil)
            declaration.isDynamic = true
            state.withLock { $0.declarations[identifier] = declaration }
        }
        return .unchecked(identifier)
    }

    func type(forExtension ext: String, conformingTo supertype: UTType) -> UTType? {
        let candidates = state.withLock { $0.byExtension[ext] ?? [] }
        return candidates.lazy.map(UTType.unchecked).first { $0.conforms(to: supertype) }
    }

    func type(forMIMEType mime: String, conformingTo supertype: UTType) -> UTType? {
        let candidates = state.withLock { $0.byMIMEType[mime] ?? [] }
        return candidates.lazy.map(UTType.unchecked).first { $0.conforms(to: supertype) }
    }

    func ancestors(of identifier: String) -> Set<String> {
        state.withLock { state in
            if let cached = state.ancestorCache[identifier] { return cached }
            var seen: Set<String> = []
            var pending = state.declarations[identifier]?.parents ?? []
            while let next = pending.popLast() {
                guard seen.insert(next).inserted else { continue }
                pending.append(contentsOf: state.declarations[next]?.parents ?? [])
            }
            state.ancestorCache[identifier] = seen
            return seen
        }
    }

    private func insert(_ declaration: UTTypeDeclaration) {
        state.withLock { state in
            if let old = state.declarations[declaration.identifier] {
                for ext in old.filenameExtensions { state.byExtension[ext]?.removeAll { $0 == old.identifier } }
                for mime in old.mimeTypes { state.byMIMEType[mime]?.removeAll { $0 == old.identifier } }
            }
            state.declarations[declaration.identifier] = declaration
            // A type declared later for a tag wins over the built-in one, so a program can
            // claim an extension (a package type for ".notes", say) for its own type.
            for ext in declaration.filenameExtensions {
                state.byExtension[ext, default: []].insert(declaration.identifier, at: 0)
            }
            for mime in declaration.mimeTypes {
                state.byMIMEType[mime, default: []].insert(declaration.identifier, at: 0)
            }
            state.ancestorCache = [:]
        }
    }

    private static let systemDeclarations: [UTTypeDeclaration] = {
        func d(_ id: String, _ parents: [String], _ exts: [String] = [], _ mimes: [String] = [], _ text: String)
            -> UTTypeDeclaration
        {
            UTTypeDeclaration(
                identifier: id, parents: parents, filenameExtensions: exts, mimeTypes: mimes, description: text)
        }
        // Listed parents first; a later built-in that shares an extension takes precedence.
        return [
            d("public.item", [], [], [], "item"),
            d("public.content", [], [], [], "content"),
            d("public.composite-content", ["public.content"], [], [], "composite content"),
            d("public.data", ["public.item"], [], [], "data"),
            d("public.directory", ["public.item"], [], [], "directory"),
            d("public.folder", ["public.directory"], [], [], "folder"),
            d("com.apple.package", ["public.directory"], [], [], "package"),
            d("public.symlink", ["public.item"], [], [], "symbolic link"),
            d("public.text", ["public.data", "public.content"], [], [], "text"),
            // Before plain text, so that ".txt" alone names public.plain-text, as on Apple platforms.
            d(
                "public.utf8-plain-text", ["public.plain-text"], ["txt", "text"], ["text/plain;charset=utf-8"],
                "UTF-8 plain text"),
            d("public.plain-text", ["public.text"], ["txt", "text"], ["text/plain"], "plain text"),
            d("public.utf16-plain-text", ["public.plain-text"], [], [], "UTF-16 plain text"),
            d("public.delimited-values-text", ["public.text"], [], [], "delimited values text"),
            d(
                "public.comma-separated-values-text", ["public.delimited-values-text"], ["csv"], ["text/csv"],
                "CSV text"),
            d(
                "public.tab-separated-values-text", ["public.delimited-values-text"], ["tsv"],
                ["text/tab-separated-values"],
                "TSV text"),
            d("public.source-code", ["public.plain-text"], [], [], "source code"),
            d("public.swift-source", ["public.source-code"], ["swift"], [], "Swift source"),
            d("public.script", ["public.source-code"], [], [], "script"),
            d("public.shell-script", ["public.script"], ["sh", "bash"], ["application/x-sh"], "shell script"),
            d("public.python-script", ["public.script"], ["py"], ["text/x-python"], "Python script"),
            d("public.json", ["public.text"], ["json"], ["application/json"], "JSON"),
            d("public.xml", ["public.text"], ["xml"], ["application/xml", "text/xml"], "XML"),
            d("public.yaml", ["public.text"], ["yaml", "yml"], ["application/x-yaml"], "YAML"),
            d("public.html", ["public.text"], ["html", "htm"], ["text/html"], "HTML"),
            d("net.daringfireball.markdown", ["public.plain-text"], ["md", "markdown"], ["text/markdown"], "Markdown"),
            d("com.apple.property-list", ["public.data"], ["plist"], [], "property list"),
            d("public.log", ["public.plain-text"], ["log"], [], "log"),
            d("public.image", ["public.data", "public.content"], [], [], "image"),
            d("public.png", ["public.image"], ["png"], ["image/png"], "PNG image"),
            d("public.jpeg", ["public.image"], ["jpeg", "jpg"], ["image/jpeg"], "JPEG image"),
            d("com.adobe.pdf", ["public.data", "public.composite-content"], ["pdf"], ["application/pdf"], "PDF"),
            d("public.archive", ["public.data"], [], [], "archive"),
            d("public.zip-archive", ["public.archive"], ["zip"], ["application/zip"], "ZIP archive"),
            d("org.gnu.gnu-zip-archive", ["public.archive"], ["gz"], ["application/gzip"], "gzip archive"),
        ]
    }()
}
