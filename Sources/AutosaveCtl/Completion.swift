import Foundation

/// The shell completion scripts `autosavectl completion bash|zsh|fish` prints, made
/// from the subcommand table so that they offer exactly what the tool accepts:
/// subcommands, their options, and the documents of the running daemon (from
/// `autosavectl list --names`, quietly nothing when it cannot be reached).
enum Completion {
    static func script(for shell: String) -> String? {
        switch shell {
        case "bash": bash
        case "zsh": zsh
        case "fish": fish
        default: nil
        }
    }

    /// Options every subcommand takes.
    static let commonOptions = ["--socket", "--json", "--help"]

    /// Options that take a value, and what the value is.
    static let valueKinds: [String: String] = [
        "--socket": "file", "--file": "file", "--to": "directory", "--events": "events",
    ]

    static let events = ["saved", "save-failed", "changed-on-disk", "conflict", "recreated", "renamed", "closed"]

    /// The option names of a subcommand (`--pointer POINTER` → `--pointer`).
    static func options(of subcommand: Subcommand) -> [String] {
        subcommand.options.flatMap { $0.0.split(separator: " ").map(String.init) }.filter { $0.hasPrefix("-") }
            .map { $0.trimmingCharacters(in: [","]) }
    }

    /// Whether the subcommand's first argument names a document.
    static func takesDocuments(_ subcommand: Subcommand) -> Bool {
        subcommand.arguments.first.map { $0.0.hasPrefix("<doc>") } ?? false
    }

    static var shells: [String] { ["bash", "zsh", "fish"] }

    static var bash: String {
        let names = Catalog.subcommands.map(\.name).joined(separator: " ")
        let perSubcommand = Catalog.subcommands.map { subcommand in
            "        \(subcommand.name)) options=\"\((options(of: subcommand) + commonOptions).joined(separator: " "))\" ;;"
        }.joined(separator: "\n")
        let documentSubcommands = Catalog.subcommands.filter(takesDocuments).map(\.name).joined(separator: "|")
        let valueOptions = CommandLineTool.valueOptions.sorted().joined(separator: "|")
        return """
            # bash completion for autosavectl (autosavectl completion bash)
            _autosavectl() {
                local cur prev words cword
                if declare -F _init_completion >/dev/null; then
                    _init_completion || return
                else
                    cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
                    words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
                fi
                local subcommand="" socket=() options i
                for ((i = 1; i < cword; i++)); do
                    case ${words[i]} in
                    --socket) socket=(--socket "${words[i + 1]}") && ((i++)) ;;
                    --socket=*) socket=("${words[i]}") ;;
                    \(valueOptions)) ((i++)) ;;
                    -*) ;;
                    *) [[ -z $subcommand ]] && subcommand=${words[i]} ;;
                    esac
                done
                case $prev in
                --socket | --file)
                    COMPREPLY=($(compgen -f -- "$cur"))
                    return
                    ;;
                --to)
                    COMPREPLY=($(compgen -d -- "$cur"))
                    return
                    ;;
                --events)
                    COMPREPLY=($(compgen -W "\(events.joined(separator: " "))" -- "${cur##*,}"))
                    return
                    ;;
                \(valueOptions)) return ;;
                esac
                if [[ -z $subcommand ]]; then
                    if [[ $cur == -* ]]; then
                        COMPREPLY=($(compgen -W "--socket --json --help --version" -- "$cur"))
                    else
                        COMPREPLY=($(compgen -W "\(names)" -- "$cur"))
                    fi
                    return
                fi
                case $subcommand in
            \(perSubcommand)
                *) options="" ;;
                esac
                if [[ $cur == -* ]]; then
                    COMPREPLY=($(compgen -W "$options" -- "$cur"))
                    return
                fi
                case $subcommand in
                \(documentSubcommands))
                    local IFS=$'\\n'
                    COMPREPLY=($(compgen -W "$(autosavectl "${socket[@]}" list --names 2>/dev/null)" -- "$cur"))
                    ;;
                completion) COMPREPLY=($(compgen -W "\(shells.joined(separator: " "))" -- "$cur")) ;;
                esac
            }
            complete -F _autosavectl autosavectl

            """
    }

    /// zsh's single quotes: `'` is written `'\''`.
    static func zshQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    static var zsh: String {
        let described = Catalog.subcommands.map { "        " + zshQuoted("\($0.name):\($0.abstract)") }.joined(
            separator: "\n")
        let perSubcommand = Catalog.subcommands.map { subcommand in
            "        \(subcommand.name)) options=(\((options(of: subcommand) + commonOptions).joined(separator: " "))) ;;"
        }.joined(separator: "\n")
        let documentSubcommands = Catalog.subcommands.filter(takesDocuments).map(\.name).joined(separator: "|")
        let valueOptions = CommandLineTool.valueOptions.sorted().joined(separator: "|")
        return """
            #compdef autosavectl
            # zsh completion for autosavectl (autosavectl completion zsh)
            _autosavectl() {
                local -a subcommands options socket documents
                local subcommand="" i
                subcommands=(
            \(described)
                )
                for ((i = 2; i < CURRENT; i++)); do
                    case ${words[i]} in
                    --socket) socket=(--socket "${words[i + 1]}"); ((i++)) ;;
                    --socket=*) socket=("${words[i]}") ;;
                    \(valueOptions)) ((i++)) ;;
                    -*) ;;
                    *) [[ -z $subcommand ]] && subcommand=${words[i]} ;;
                    esac
                done
                case ${words[CURRENT - 1]} in
                --socket | --file) _files; return ;;
                --to) _files -/; return ;;
                --events) _sequence compadd - \(events.joined(separator: " ")); return ;;
                \(valueOptions)) return ;;
                esac
                if [[ -z $subcommand ]]; then
                    if [[ ${words[CURRENT]} == -* ]]; then
                        compadd -- --socket --json --help --version
                    else
                        _describe -t subcommands 'autosavectl subcommand' subcommands
                    fi
                    return
                fi
                case $subcommand in
            \(perSubcommand)
                esac
                if [[ ${words[CURRENT]} == -* ]]; then
                    compadd -- $options
                    return
                fi
                case $subcommand in
                \(documentSubcommands))
                    documents=(${(f)"$(autosavectl $socket list --names 2>/dev/null)"})
                    compadd -- $documents
                    ;;
                completion) compadd -- \(shells.joined(separator: " ")) ;;
                esac
            }
            if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
                _autosavectl "$@"
            else
                compdef _autosavectl autosavectl
            fi

            """
    }

    /// fish's single quotes: `\` and `'` escaped.
    static func fishQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }

    static var fish: String {
        var lines = [
            "# fish completion for autosavectl (autosavectl completion fish)",
            "function __autosavectl_documents",
            "    set -l words (commandline -opc)",
            "    set -l socket (string match -r -- '^--socket=.*' $words)",
            "    if set -l index (contains -i -- --socket $words)",
            "        set socket --socket $words[(math $index + 1)]",
            "    end",
            "    autosavectl $socket list --names 2>/dev/null",
            "end",
            "complete -c autosavectl -f",
            "complete -c autosavectl -n '__fish_use_subcommand' -l version -d 'Print the version and exit.'",
            "complete -c autosavectl -l socket -r -F -d 'The daemon\\'s control socket.'",
            "complete -c autosavectl -l json -d 'Print the daemon\\'s replies as JSON.'",
            "complete -c autosavectl -s h -l help -d 'Show the help.'",
        ]
        for subcommand in Catalog.subcommands {
            lines.append(
                "complete -c autosavectl -n '__fish_use_subcommand' -a \(subcommand.name) -d \(fishQuoted(subcommand.abstract))"
            )
            let condition = "-n '__fish_seen_subcommand_from \(subcommand.name)'"
            for (option, description) in subcommand.options {
                let parts = option.split(separator: " ")
                guard let name = parts.first, name.hasPrefix("--") else { continue }
                var line = "complete -c autosavectl \(condition) -l \(name.dropFirst(2))"
                switch valueKinds[String(name)] {
                case "file": line += " -r -F"
                case "directory": line += " -r -a '(__fish_complete_directories)'"
                case "events": line += " -r -a '\(events.joined(separator: " "))'"
                default: if parts.count > 1 { line += " -r" }
                }
                lines.append(line + " -d \(fishQuoted(description))")
            }
            if takesDocuments(subcommand) {
                lines.append("complete -c autosavectl \(condition) -a '(__autosavectl_documents)'")
            }
        }
        lines.append(
            "complete -c autosavectl -n '__fish_seen_subcommand_from completion' -a '\(shells.joined(separator: " "))'")
        return lines.joined(separator: "\n") + "\n"
    }
}
