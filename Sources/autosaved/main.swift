import Autosave
import Foundation

// Wiring only: the daemon lives in the Autosave library.
exit(await Daemon.run(arguments: Array(CommandLine.arguments.dropFirst())))
