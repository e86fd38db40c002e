// swift-tools-version:6.0
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    // A request crosses five modules (Posix, Control, Journal, Documents, Autosave): their
    // generic code (locks, buffers, the decoder's helpers) is specialized and inlined
    // where the daemon calls it, not called through its generic entry points.
    .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release)),
]

let package = Package(
    name: "autosaved",
    products: [
        .library(name: "Documents", targets: ["Documents"]),
        .library(name: "Posix", targets: ["Posix"]),
        .library(name: "Journal", targets: ["Journal"]),
        .library(name: "Autosave", targets: ["Autosave"]),
        .library(name: "Control", targets: ["Control"]),
        // For programs that run the store and the control server in-process (the fuzz
        // targets in Fuzz/), which pass them a Logger.
        .library(name: "Logging", targets: ["Logging"]),
        .executable(name: "autosaved", targets: ["autosaved"]),
        .executable(name: "autosavectl", targets: ["autosavectl"]),
    ],
    targets: [
        // _GNU_SOURCE-only pieces of glibc (renameat2, RENAME_*, O_TMPFILE, struct ucred, openat2).
        // With Debian's liburing (liburing-dev) for the loop's batched sends.
        .target(name: "CLinux", linkerSettings: [.linkedLibrary("uring")]),
        // libsystemd through pkg-config; the shim header suppresses sd-journal's automatic CODE_* fields.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .target(name: "Posix", dependencies: ["CLinux"], swiftSettings: strictSettings),
        .target(name: "Documents", dependencies: ["Posix"], swiftSettings: strictSettings),
        // The edit journal: segment files of checksummed records, group commit, replay.
        .target(name: "Journal", dependencies: ["Posix"], swiftSettings: strictSettings),
        // Logger and log levels, with the stderr handler; Systemd adds the journald one.
        .target(name: "Logging", swiftSettings: strictSettings),
        // sd_notify, the watchdog, socket activation and the journald log handler.
        .target(name: "Systemd", dependencies: ["CSystemd", "Posix", "Logging"], swiftSettings: strictSettings),
        // The control protocol, shared by the daemon and autosavectl: JSON, messages, socket paths, a client.
        .target(name: "Control", dependencies: ["CLinux", "Posix"], swiftSettings: strictSettings),
        .target(
            name: "Autosave",
            dependencies: ["CLinux", "Documents", "Journal", "Posix", "Control", "Logging", "Systemd"],
            swiftSettings: strictSettings),
        .executableTarget(name: "autosaved", dependencies: ["Autosave"], swiftSettings: strictSettings),
        // autosavectl's parsing, requests and output; it speaks only the protocol (never Systemd).
        .target(name: "AutosaveCtl", dependencies: ["Control", "Logging", "Posix"], swiftSettings: strictSettings),
        .executableTarget(name: "autosavectl", dependencies: ["AutosaveCtl"], swiftSettings: strictSettings),
        // The daemon with an in-process edit driver, for the daemon harnesses and benchmarks.
        .executableTarget(name: "AutosaveProbe", dependencies: ["Autosave"], swiftSettings: strictSettings),
        // A small command-line driver over Documents used by the crash, strace and benchmark harnesses.
        .executableTarget(
            name: "DocumentsProbe",
            dependencies: ["Documents", "Posix"],
            swiftSettings: strictSettings
        ),
        // A command-line driver over Journal for the crash test and the benchmark.
        .executableTarget(name: "JournalProbe", dependencies: ["Journal", "Posix"], swiftSettings: strictSettings),
        // Temporary directories, mounts and processes for the test suites.
        .target(
            name: "TestSupport", dependencies: ["Documents", "Posix"], path: "Tests/TestSupport",
            swiftSettings: strictSettings),
        .testTarget(name: "PosixTests", dependencies: ["Posix"], swiftSettings: strictSettings),
        .testTarget(
            name: "JournalTests",
            dependencies: ["Journal", "Posix", "TestSupport", "JournalProbe"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "AutosaveTests",
            dependencies: [
                "Autosave", "Control", "Documents", "Journal", "Logging", "Posix", "Systemd", "TestSupport",
                "autosaved", "autosavectl", "AutosaveProbe",
            ],
            swiftSettings: strictSettings),
        .testTarget(
            name: "DocumentsTests",
            dependencies: ["Documents", "Posix", "TestSupport", "DocumentsProbe"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
