import AutosaveCtl
import Foundation

// Wiring only: the tool lives in the AutosaveCtl library.
exit(CommandLineTool.main(Array(CommandLine.arguments.dropFirst())))
