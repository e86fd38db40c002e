import Autosave
import Foundation

// Wiring only: the daemon lives in the Autosave library. The process's settings come
// before anything starts a thread.
Daemon.prepareProcess()
exit(await Daemon.run(arguments: Array(CommandLine.arguments.dropFirst())))
