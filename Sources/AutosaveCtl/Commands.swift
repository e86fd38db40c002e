import Control
import Foundation

/// One `autosavectl` subcommand: its help and how its arguments become a request.
struct Subcommand {
    var name: String
    var abstract: String
    var usage: String
    var arguments: [(String, String)] = []
    var options: [(String, String)] = []
    var discussion: String? = nil

    var help: String {
        var text = "OVERVIEW: \(abstract)\n\nUSAGE: autosavectl \(name) \(usage)\n"
        if !arguments.isEmpty {
            text +=
                "\nARGUMENTS:\n"
                + arguments.map { "  " + $0.0.padding(toLength: 24, withPad: " ", startingAt: 0) + $0.1 }.joined(
                    separator: "\n") + "\n"
        }
        let all =
            options + [
                ("--socket PATH", "The daemon's control socket (default: \(ControlProtocol.defaultSocketPath())).")
            ]
            + [("--json", "Print the daemon's reply as JSON instead of text."), ("-h, --help", "Show this help.")]
        text +=
            "\nOPTIONS:\n"
            + all.map { "  " + $0.0.padding(toLength: 24, withPad: " ", startingAt: 0) + $0.1 }.joined(separator: "\n")
            + "\n"
        if let discussion { text += "\n" + discussion + "\n" }
        return text
    }
}

enum Catalog {
    static let contentOptions: [(String, String)] = [
        ("--text TEXT", "The contents, as text."),
        ("--file PATH", "Read the contents from a file ('-' for standard input)."),
    ]

    static let subcommands: [Subcommand] = [
        Subcommand(
            name: "status",
            abstract: "Show the daemon's counters: documents, unsaved, saving, failed, memory, last save and failure.",
            usage: "[options]"),
        Subcommand(
            name: "list", abstract: "List the open documents and their save state.", usage: "[--names] [options]",
            options: [("--names", "Print only the documents' paths, one per line (for scripts and completion).")]),
        Subcommand(
            name: "open", abstract: "Open a document from disk.", usage: "<doc> [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")]),
        Subcommand(
            name: "create", abstract: "Create a new, empty document (its type from its extension).",
            usage: "<doc> [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")]),
        Subcommand(
            name: "get",
            abstract: "Print a document, a JSON value inside it, a package member, or a package's members.",
            usage: "<doc> [--pointer POINTER | --member PATH | --members] [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")],
            options: [
                ("--pointer POINTER", "An RFC 6901 JSON pointer into a JSON document (/a/0/b)."),
                ("--member PATH", "A member file of a package document."),
                ("--members", "List a package document's member files."),
            ]),
        Subcommand(
            name: "set", abstract: "Replace a document's contents; the document is created if it does not exist.",
            usage: "<doc> [--text TEXT | --file PATH] [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")],
            options: contentOptions,
            discussion: """
                With neither --text nor --file the contents are read from standard input. The
                contents of a .json document must be valid JSON; a file that is not UTF-8 is sent
                as bytes (base64).
                """),
        Subcommand(
            name: "append", abstract: "Add text at the end of a text document.",
            usage: "<doc> [--text TEXT | --file PATH] [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")], options: contentOptions,
            discussion: "With neither --text nor --file the text is read from standard input."),
        Subcommand(
            name: "replace", abstract: "Replace a range of UTF-8 bytes of a text document.",
            usage: "<doc> --offset N --length N [--text TEXT | --file PATH] [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")],
            options: [
                ("--offset N", "The first byte replaced (0-based)."), ("--length N", "How many bytes are replaced."),
            ] + contentOptions),
        Subcommand(
            name: "patch", abstract: "Apply an RFC 7396 JSON merge patch to a JSON document.",
            usage: "<doc> [--patch JSON | --file PATH] [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")],
            options: [
                ("--patch JSON", "The merge patch."),
                ("--file PATH", "Read the patch from a file ('-' for standard input)."),
            ]),
        Subcommand(
            name: "put-member", abstract: "Create or replace a member file of a package document.",
            usage: "<doc> <member> [--text TEXT | --file PATH] [options]",
            arguments: [
                ("<doc>", "The package's path relative to the store root."),
                ("<member>", "The member's path inside the package."),
            ],
            options: contentOptions),
        Subcommand(
            name: "remove-member", abstract: "Remove a member file of a package document.",
            usage: "<doc> <member> [options]",
            arguments: [
                ("<doc>", "The package's path relative to the store root."),
                ("<member>", "The member's path inside the package."),
            ]),
        Subcommand(
            name: "save", abstract: "Save a document now (or every document with --all).",
            usage: "(<doc> | --all) [--wait] [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")],
            options: [
                ("--all", "Save every document with unsaved edits."),
                ("--wait", "Return only once the edits are durable on disk."),
            ]),
        Subcommand(
            name: "save-all", abstract: "Save every document with unsaved edits now (the same as save --all).",
            usage: "[--wait] [options]",
            options: [("--wait", "Return only once the edits are durable on disk.")]),
        Subcommand(
            name: "revert", abstract: "Throw away unsaved edits and read the document from disk again.",
            usage: "<doc> [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")]),
        Subcommand(
            name: "close", abstract: "Save a document if needed, then close it.", usage: "<doc> [options]",
            arguments: [("<doc>", "The document's path relative to the store root.")]),
        Subcommand(
            name: "export", abstract: "Export documents into a directory, all or nothing.",
            usage: "<doc>... --to DIR [--type UTI] [options]",
            arguments: [("<doc>...", "The documents' paths relative to the store root.")],
            options: [
                (
                    "--to DIR",
                    "The directory: relative to the store root, or an absolute path allowed by ExportDirectories=."
                ),
                ("--type UTI", "The content type to export as (default: each document's own)."),
            ],
            discussion: "Progress is shown on standard error. Ctrl-C cancels the export and leaves nothing behind."),
        Subcommand(
            name: "subscribe", abstract: "Print events as they happen, one per line, until Ctrl-C.",
            usage: "[<doc>...] [--events saved,save-failed] [options]",
            arguments: [("<doc>...", "Only events about these documents (default: all).")],
            options: [
                (
                    "--events LIST",
                    "Only these events (default: saved,save-failed,changed-on-disk,conflict,recreated,renamed; also closed)."
                )
            ]),
        Subcommand(
            name: "sync", abstract: "Wait until the daemon has seen every file change made before this call.",
            usage: "[options]"),
        Subcommand(name: "reload", abstract: "Make the daemon read its configuration again.", usage: "[options]"),
        Subcommand(
            name: "metrics", abstract: "Print the daemon's figures in the Prometheus text format.",
            usage: "[options]",
            discussion: """
                Saves, failures by errno, bytes written, save durations, documents by state,
                other programs' changes, conflicts, overflows, watched and polled directories.
                [Metrics] TextfileDirectory= writes the same text for node_exporter.
                """),
        Subcommand(
            name: "completion", abstract: "Print the shell completion script for bash, zsh or fish.",
            usage: "(bash | zsh | fish)",
            arguments: [("bash | zsh | fish", "The shell.")],
            discussion: """
                Subcommands, options and the documents of the running daemon (nothing when it
                cannot be reached) are completed. Load it with
                  source <(autosavectl completion bash)                    # bash, in ~/.bashrc
                  autosavectl completion zsh > ~/.zfunc/_autosavectl     # zsh, with ~/.zfunc on fpath
                  autosavectl completion fish > ~/.config/fish/completions/autosavectl.fish
                """),
    ]

    static let overview = """
        OVERVIEW: autosavectl drives the autosaved daemon through its control socket.

        USAGE: autosavectl [--socket PATH] [--json] <subcommand> [<args>]

        OPTIONS:
          --socket PATH           The daemon's control socket (default: \(ControlProtocol.defaultSocketPath())).
          --json                  Print the daemon's replies as JSON instead of text.
          -h, --help              Show this help; 'autosavectl <subcommand> --help' for a subcommand's.
          --version               Print the version and exit.

        SUBCOMMANDS:
        \(subcommands.map { "  " + $0.name.padding(toLength: 24, withPad: " ", startingAt: 0) + $0.abstract }.joined(separator: "\n"))

        EXIT STATUS: 0 done; 1 the daemon refused (its error is printed); 64 usage error;
        69 the daemon cannot be reached; 130 interrupted (subscribe: 0) or export cancelled.
        """
}
