import Control
import Foundation
import TestSupport
import Testing

@testable import Autosave

/// The man pages in `man/`: complete against the CLI's own help and the configuration
/// parser's keys, and rendered by `man` without a warning.
@Suite("Man pages")
struct ManPageTests {
    static let pages = ["autosaved.8", "autosavectl.1", "autosaved.conf.5"]

    static func source(_ page: String) throws -> String {
        try String(contentsOfFile: ShippedConfigurationTests.repository + "/man/" + page, encoding: .utf8)
    }

    /// roff text as read: `\-` as `-`, font escapes and quotes gone.
    static func plain(_ roff: String) -> String {
        roff.replacingOccurrences(of: "\\-", with: "-").replacing(#/\\f[BIRP]/#, with: "")
            .replacingOccurrences(of: "\"", with: "")
    }

    /// The words of the tags of the page's `.TP` paragraphs, by the `.SH` section they
    /// are in.
    static func tags(_ roff: String) -> [String: [String]] {
        var result: [String: [String]] = [:]
        var section = ""
        let lines = roff.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (index, line) in lines.enumerated() {
            if line.hasPrefix(".SH ") { section = plain(String(line.dropFirst(4))) }
            guard line == ".TP", index + 1 < lines.count else { continue }
            var tag = plain(lines[index + 1])
            for macro in [".BI ", ".BR ", ".B ", ".IR ", ".I "] where tag.hasPrefix(macro) {
                tag = String(tag.dropFirst(macro.count))
            }
            result[section, default: []] += tag.split(separator: " ").map { String($0.trimmingCharacters(in: [","])) }
        }
        return result
    }

    /// Whether `word` occurs in `text` as a word of its own (not inside a longer option).
    static func mentions(_ text: String, _ word: String) -> Bool {
        var searched = text[...]
        while let range = searched.range(of: word) {
            let before = range.lowerBound == text.startIndex ? " " : text[text.index(before: range.lowerBound)]
            let after = range.upperBound == text.endIndex ? " " : text[range.upperBound]
            let wordy = { (c: Character) in c.isLetter || c.isNumber || c == "-" }
            if !wordy(before) && !wordy(after) { return true }
            searched = text[range.upperBound...]
        }
        return false
    }

    @Test("autosavectl(1) describes every subcommand and every option autosavectl's help lists")
    func autosavectl() throws {
        let ctl = Machine.product("autosavectl")
        let overview = try Machine.run(ctl, ["--help"]).stdout
        let listed = overview.components(separatedBy: "SUBCOMMANDS:\n")[1].components(separatedBy: "\n\n")[0]
        let subcommands = listed.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }
        #expect(subcommands.count >= 18, "\(subcommands)")
        var options: Set<String> = []
        for help in [overview] + (try subcommands.map { try Machine.run(ctl, [$0, "--help"]).stdout }) {
            let section = help.components(separatedBy: "OPTIONS:\n").last?.components(separatedBy: "\n\n")[0] ?? ""
            for line in section.split(separator: "\n") where line.hasPrefix("  -") {
                options.formUnion(line.prefix(26).matches(of: #/--?[a-z][a-z-]*/#).map { String($0.output) })
            }
        }
        #expect(options.isSuperset(of: ["--socket", "--json", "--help", "-h", "--version", "--wait", "--events"]))
        let page = try Self.source("autosavectl.1")
        let tags = Self.tags(page)
        let text = Self.plain(page)
        for subcommand in subcommands {
            #expect(tags["SUBCOMMANDS"]?.contains(subcommand) == true, "autosavectl(1) has no entry for \(subcommand)")
        }
        for option in options.sorted() {
            #expect(Self.mentions(text, option), "autosavectl(1) never names \(option)")
        }
        #expect(tags["OPTIONS"]?.contains("--socket") == true)
    }

    @Test("autosaved.conf(5) describes every configuration key, each in its section")
    func configuration() throws {
        let tags = Self.tags(try Self.source("autosaved.conf.5"))
        for (section, keys) in Configuration.keys {
            let described = (tags["[\(section)]"] ?? []).map { String($0.prefix { $0 != "=" }) }
            for key in keys {
                #expect(described.contains(key), "autosaved.conf(5) has no entry for \(key)= in [\(section)]")
            }
        }
    }

    @Test("autosaved(8) describes every option of autosaved --help")
    func autosaved() throws {
        let help = try Machine.run(Machine.product("autosaved"), ["--help"]).stdout
        let section = help.components(separatedBy: "OPTIONS:\n")[1].components(separatedBy: "\n\n")[0]
        let options = Set(
            section.split(separator: "\n").filter { $0.hasPrefix("  -") }.flatMap {
                $0.prefix(20).matches(of: #/--[a-z][a-z-]*/#).map { String($0.output) }
            })
        #expect(options.contains("--check-config"))
        let tags = Self.tags(try Self.source("autosaved.8"))["OPTIONS"] ?? []
        for option in options { #expect(tags.contains(option), "autosaved(8) has no entry for \(option)") }
    }

    @Test("Each page names the current version", arguments: pages)
    func version(page: String) throws {
        let header = try #require(try Self.source(page).split(separator: "\n").first { $0.hasPrefix(".TH ") })
        #expect(header.contains("\"autosaved \(AutosaveVersion.current)\""), "\(header)")
    }

    @Test(
        "man --warnings -l renders each page without a warning", .enabled(if: Machine.has("man"), "needs man-db"),
        arguments: pages)
    func renders(page: String) throws {
        let path = ShippedConfigurationTests.repository + "/man/" + page
        var environment = ProcessInfo.processInfo.environment
        environment["MANWIDTH"] = "80"
        environment["LC_ALL"] = "C.UTF-8"
        let result = try Shell.execute("man", ["--warnings", "-l", path], environment: environment)
        #expect(result.status == 0)
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        #expect(result.stdout.contains("NAME"))
    }
}
