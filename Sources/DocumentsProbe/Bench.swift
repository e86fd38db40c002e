enum Bench { static func run(_ command: String, arguments: [String]) throws {} }
